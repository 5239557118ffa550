// table_memory.h: memory for the cache's own lookup tables (the per-thread
// tables of thread_cache.h, the covering hints of covering_hints.h): whole
// zeroed pages of their own, mapped and unmapped directly, so that a freed
// table goes back to the system at once and its unmapping is no application
// event for the memory monitors to report.
#ifndef MRCACHE_CORE_TABLE_MEMORY_H_
#define MRCACHE_CORE_TABLE_MEMORY_H_

#include <cstddef>

namespace mrcache {

// `bytes` of zeroed, page-aligned memory, or MAP_FAILED; from 2 MiB on,
// 2 MiB-aligned and advised to use transparent huge pages. Through syscall(2),
// not mmap(3), except under a sanitizer, whose runtime must learn of the
// mapping (a reused address range then keeps no stale shadow state).
void* MapTableMemory(size_t bytes);
// Unmaps memory from MapTableMemory(bytes).
void UnmapTableMemory(void* p, size_t bytes);

}  // namespace mrcache

#endif  // MRCACHE_CORE_TABLE_MEMORY_H_
