// mapping_bounds.h: the extent of the mapping (VMA) that holds an address.
//
// Bridging (cache_impl.cc) widens a registration over resident memory around
// a request, but never past the mapping that holds it: a neighbouring mapping
// may be read-only (registering it for write fails), or be unmapped on its own
// schedule (and take the bridged region with it).
//
// Reads /proc/self/maps with open/read into a fixed stack buffer: no heap
// allocation, no lock, no memory-event side effects; one pass per call. The
// answer can be out of date as soon as it returns: it only steers a heuristic,
// registration itself decides what is valid.
#ifndef MRCACHE_MAPPING_BOUNDS_H_
#define MRCACHE_MAPPING_BOUNDS_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

struct MappingExtent {
  uintptr_t start = 0;  // of the mapping holding `low`
  uintptr_t end = 0;    // of the mapping holding `high`
};

// Looks up the mappings holding the addresses `low` and `high` (low <= high;
// they may be the same mapping). False if either is unmapped or
// /proc/self/maps cannot be read.
bool FindMappingExtent(uintptr_t low, uintptr_t high, MappingExtent* out);

struct MappingScan {
  uintptr_t first = 0;     // start of the first mapping overlapping the range
  uintptr_t last = 0;      // end of the last one (first == last == 0 if none)
  bool covered = false;    // every page of the range is mapped
  bool anonymous = false;  // every mapping overlapping the range is private anonymous memory
  size_t map_count = 0;    // lines in /proc/self/maps: the process's map count
};

// One pass over /proc/self/maps: the mappings (VMAs, one per line, never
// merged with neighbours of the same kind) overlapping [start, end), and the
// number of mappings of the process. Registering exactly [first, last) with a
// range-tracking facility (uffd_monitor.h) splits no mapping. False if
// /proc/self/maps cannot be read. Same context rules as FindMappingExtent.
bool ScanMappings(uintptr_t start, uintptr_t end, MappingScan* out);

}  // namespace mrcache

#endif  // MRCACHE_MAPPING_BOUNDS_H_
