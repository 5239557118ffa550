#include "mrcache/core/table_memory.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace mrcache {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MRCACHE_TABLES_THROUGH_LIBC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MRCACHE_TABLES_THROUGH_LIBC 1
#endif
#endif

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

void* Map(size_t bytes) {
#ifdef MRCACHE_TABLES_THROUGH_LIBC
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#else
  return reinterpret_cast<void*>(syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
#endif
}

void Unmap(void* p, size_t bytes) {
#ifdef MRCACHE_TABLES_THROUGH_LIBC
  munmap(p, bytes);
#else
  syscall(SYS_munmap, p, bytes);
#endif
}

// Asks for transparent huge pages; where the kernel has them off, nothing changes.
void AdviseHugePages(void* p, size_t bytes) {
#ifdef MRCACHE_TABLES_THROUGH_LIBC
  (void)madvise(p, bytes, MADV_HUGEPAGE);
#else
  (void)syscall(SYS_madvise, p, bytes, MADV_HUGEPAGE);
#endif
}

}  // namespace

void* MapTableMemory(size_t bytes) {
  if (bytes < kHugePage) return Map(bytes);
  // A large table is read at random, a line per lookup: on 4 KiB pages
  // nearly every lookup would also miss the TLB. Map it 2 MiB-aligned (the
  // slack is unmapped at once) and ask for huge pages; it is written whole
  // when built, so they add no memory.
  char* raw = static_cast<char*>(Map(bytes + kHugePage));
  if (raw == MAP_FAILED) return MAP_FAILED;
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1);
  char* p = reinterpret_cast<char*>(aligned);
  if (p > raw) Unmap(raw, static_cast<size_t>(p - raw));
  char* end = raw + bytes + kHugePage;
  if (p + bytes < end) Unmap(p + bytes, static_cast<size_t>(end - (p + bytes)));
  AdviseHugePages(p, bytes);
  return p;
}

void UnmapTableMemory(void* p, size_t bytes) { Unmap(p, bytes); }

}  // namespace mrcache
