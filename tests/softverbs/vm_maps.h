// vm_maps.h: what /proc/self/maps and /proc/self/smaps say about this
// process's mappings, for tests of fork protection and pinning.
#ifndef SOFTVERBS_VM_MAPS_H_
#define SOFTVERBS_VM_MAPS_H_

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace softverbs {

// The number of mappings (VMAs) of this process: lines of /proc/self/maps.
inline long MapCount() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  long n = 0;
  while (std::getline(maps, line)) ++n;
  return n;
}

// The number of mappings that overlap [addr, addr+len).
inline long MappingsIn(const void* addr, size_t len) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  long n = 0;
  while (std::getline(maps, line)) {
    uintptr_t start = 0, end = 0;
    if (sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &start, &end) == 2 && start < a + len &&
        a < end) {
      ++n;
    }
  }
  return n;
}

// Whether the mapping holding `addr` carries the VmFlags code `flag` ("dc":
// MADV_DONTFORK, "lo": mlock'ed) in /proc/self/smaps. false if unmapped.
inline bool HasVmFlag(const void* addr, const std::string& flag) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    if (sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = start <= a && a < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string f;
      while (flags >> f) {
        if (f == flag) return true;
      }
      return false;
    }
  }
  return false;
}

}  // namespace softverbs

#endif  // SOFTVERBS_VM_MAPS_H_
