// free_ranges.h: the free address ranges of the pool's registered chunks.
//
// The pool hands sub-ranges of its chunks to jemalloc (the extent alloc hook)
// and gets them back (the dalloc hook). FreeRanges remembers what is free:
// ranges of whole pages, each tagged with the chunk (an opaque owner) that
// holds it. Adjacent free ranges of the same owner are kept as one; ranges of
// different owners never merge, so every range handed out lies inside one
// chunk, and a chunk whose every byte is free is one range.
//
// Take is best fit: the smallest free range that holds the request, the lowest
// address among equals. Holes left in partly used chunks are therefore filled
// before an empty chunk is touched, which keeps empty chunks empty so that the
// pool can release them.
//
// Invariants: ranges never overlap; no two ranges with the same owner touch;
// by_size_ and by_start_ hold the same ranges. Not thread-safe: the pool
// serializes every call with its own mutex.
#ifndef MRCACHE_ALLOCATOR_FREE_RANGES_H_
#define MRCACHE_ALLOCATOR_FREE_RANGES_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace mrcache {

class FreeRanges {
 public:
  struct Taken {
    uintptr_t start = 0;
    const void* owner = nullptr;
  };

  // Makes [start, start + length) free. It must not overlap a free range.
  void Add(uintptr_t start, size_t length, const void* owner);

  // Removes and returns `length` bytes starting at a multiple of `alignment`
  // (a power of two) from the best-fitting free range; owner null if none fits.
  Taken Take(size_t length, size_t alignment);

  // Removes the free range that starts at `start` and is exactly `length`
  // long (an empty chunk the pool releases). False if there is no such range.
  bool Remove(uintptr_t start, size_t length);

  size_t ranges() const { return by_start_.size(); }
  size_t free_bytes() const { return free_bytes_; }

 private:
  struct Range {
    size_t length;
    const void* owner;
  };
  void Insert(uintptr_t start, size_t length, const void* owner);
  void Erase(std::map<uintptr_t, Range>::iterator it);

  std::map<uintptr_t, Range> by_start_;
  std::set<std::pair<size_t, uintptr_t>> by_size_;  // (length, start)
  size_t free_bytes_ = 0;
};

}  // namespace mrcache

#endif  // MRCACHE_ALLOCATOR_FREE_RANGES_H_
