// map_count.h: the process's map count, read the way the kernel's limit
// counts it (one line of /proc/self/maps per mapping), independently of the
// code under test.
#ifndef MRCACHE_TESTS_MONITORS_MAP_COUNT_H_
#define MRCACHE_TESTS_MONITORS_MAP_COUNT_H_

#include <cstddef>
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

}  // namespace mrcache_test

#endif  // MRCACHE_TESTS_MONITORS_MAP_COUNT_H_
