#include "mrcache/core/table_memory.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mrcache {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MRCACHE_TABLES_THROUGH_LIBC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MRCACHE_TABLES_THROUGH_LIBC 1
#endif
#endif

void* MapTableMemory(size_t bytes) {
#ifdef MRCACHE_TABLES_THROUGH_LIBC
  return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#else
  return reinterpret_cast<void*>(syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
#endif
}

void UnmapTableMemory(void* p, size_t bytes) {
#ifdef MRCACHE_TABLES_THROUGH_LIBC
  munmap(p, bytes);
#else
  syscall(SYS_munmap, p, bytes);
#endif
}

}  // namespace mrcache
