// mapping.h: test helpers for registrar tests.
//
// AnonMapping owns an anonymous private mapping (unmapped on destruction unless
// the test already unmapped it); VmPinKib reads the process's pinned memory
// (VmPin in /proc/self/status), which io_uring fixed buffers count, and its
// mlock()ed memory (VmLck).
#ifndef TESTS_REGISTRARS_MAPPING_H_
#define TESTS_REGISTRARS_MAPPING_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

namespace mrcache_test {

class AnonMapping {
 public:
  explicit AnonMapping(size_t length, int prot = PROT_READ | PROT_WRITE, int extra_flags = 0)
      : length_(length) {
    void* p = mmap(nullptr, length, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    addr_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~AnonMapping() {
    if (addr_ != nullptr) munmap(addr_, length_);
  }
  AnonMapping(const AnonMapping&) = delete;
  AnonMapping& operator=(const AnonMapping&) = delete;

  char* addr() const { return addr_; }
  size_t length() const { return length_; }

  // Unmaps [offset, offset + len) now; Unmap(0, length()) forgets the mapping.
  void Unmap(size_t offset, size_t len) {
    munmap(addr_ + offset, len);
    if (offset == 0 && len == length_) addr_ = nullptr;
  }

  // Unmaps the whole range and maps fresh zero pages at the same address.
  // False if the address could not be had again.
  bool Remap() {
    munmap(addr_, length_);
    void* p = mmap(addr_, length_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != addr_) {
      if (p != MAP_FAILED) munmap(p, length_);
      addr_ = nullptr;
      return false;
    }
    return true;
  }

 private:
  char* addr_;
  size_t length_;
};

// A "Name:   123 kB" field of /proc/self/status in KiB, or -1.
inline long ProcStatusKib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) return std::stol(line.substr(prefix.size()));
  }
  return -1;
}

// Pinned (io_uring, RDMA) and mlock()ed memory of this process, in KiB.
inline long VmPinKib() { return ProcStatusKib("VmPin"); }
inline long VmLckKib() { return ProcStatusKib("VmLck"); }

inline bool AllBytesAre(const char* p, size_t n, char value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

}  // namespace mrcache_test

#endif  // TESTS_REGISTRARS_MAPPING_H_
