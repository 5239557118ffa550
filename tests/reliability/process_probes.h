// process_probes.h: facts about the test process that reliability tests check
// or adapt to.
#ifndef MRCACHE_TESTS_RELIABILITY_PROCESS_PROBES_H_
#define MRCACHE_TESTS_RELIABILITY_PROCESS_PROBES_H_

#include <dirent.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

// The id of a thread of this process named `name` (/proc/self/task/<tid>/comm),
// or 0 if there is none.
inline pid_t ThreadNamed(const char* name) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  pid_t found = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string comm_path = std::string("/proc/self/task/") + entry->d_name + "/comm";
    FILE* f = std::fopen(comm_path.c_str(), "r");
    if (f == nullptr) continue;  // the thread ended meanwhile
    char comm[32] = {};
    const bool read = std::fgets(comm, sizeof comm, f) != nullptr;
    std::fclose(f);
    if (read) comm[std::strcspn(comm, "\n")] = '\0';
    if (read && std::strcmp(comm, name) == 0) {
      found = static_cast<pid_t>(std::atoi(entry->d_name));
      break;
    }
  }
  closedir(dir);
  return found;
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
