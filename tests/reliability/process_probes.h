// process_probes.h: facts about the test process that reliability tests check
// or adapt to.
#ifndef MRCACHE_TESTS_RELIABILITY_PROCESS_PROBES_H_
#define MRCACHE_TESTS_RELIABILITY_PROCESS_PROBES_H_

#include <unistd.h>

#include <cstdio>

namespace mrcache {
namespace testing {

// The process's resident set in KiB (/proc/self/statm), or -1.
inline long ResidentKib() {
  long size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  std::fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// True when built with AddressSanitizer (GCC's or Clang's).
constexpr bool UnderAsan() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// True when built with ThreadSanitizer (GCC's or Clang's).
constexpr bool UnderTsan() {
#if defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

// True when built with AddressSanitizer or ThreadSanitizer, whose allocators
// replace glibc's (no mremap'ed chunks; RSS dominated by shadow memory).
constexpr bool UnderSanitizer() { return UnderAsan() || UnderTsan(); }

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_RELIABILITY_PROCESS_PROBES_H_
