// map_count.h: the process's map count, read the way the kernel's limit
// counts it (one line of /proc/self/maps per mapping), independently of the
// code under test.
#ifndef MRCACHE_TESTS_MONITORS_MAP_COUNT_H_
#define MRCACHE_TESTS_MONITORS_MAP_COUNT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace mrcache_test {

// Lines of /proc/self/maps; 0 if it cannot be read.
inline size_t ProcessMapCount() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// Lines of /proc/self/maps that overlap [start, start + length): how many
// mappings (VMAs) that range is made of. Unlike the process-wide count, it
// does not move when a sanitizer's runtime maps memory of its own meanwhile.
inline size_t MapCountIn(const void* start, size_t length) {
  const uintptr_t s = reinterpret_cast<uintptr_t>(start);
  const uintptr_t e = s + length;
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo < e && s < hi) ++n;
  }
  return n;
}

}  // namespace mrcache_test

#endif  // MRCACHE_TESTS_MONITORS_MAP_COUNT_H_
