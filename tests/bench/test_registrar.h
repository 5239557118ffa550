// test_registrar.h: a registrar for bench tests that needs no kernel support.
//
// Register checks the access rules and hands out increasing handles;
// DeviceWrite writes through the CPU mapping (so it cannot be stale by
// itself) unless it was made after MarkFutureStale, in which
// case the write goes to a private copy the CPU never sees, like a
// registration left pointing at old pages. It counts live registrations so
// tests can assert nothing leaked.
#ifndef TESTS_BENCH_TEST_REGISTRAR_H_
#define TESTS_BENCH_TEST_REGISTRAR_H_

#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrbench {

class TestRegistrar : public mrcache::Registrar {
 public:
  const char* name() const override { return "test"; }
  // It only counts: no page is pinned, so no pin budget applies to a cache
  // over it, however low RLIMIT_MEMLOCK is.
  bool pins_memory() const override { return false; }
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override {
    if (length == 0) return mrcache::ErrnoStatus(EINVAL, "empty");
    absl::Status ok = mrcache::ValidateAccess(access);
    if (!ok.ok()) return ok;
    std::lock_guard<std::mutex> lock(mu_);
    mrcache::Registration reg{addr, length, access, ++next_handle_, 1, 1};
    live_.insert(reg.handle);
    return reg;
  }
  absl::Status Deregister(const mrcache::Registration& reg) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.erase(reg.handle) != 1) return mrcache::ErrnoStatus(EINVAL, "not registered");
    return absl::OkStatus();
  }
  absl::Status DeviceWrite(const mrcache::Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    if (offset > reg.length || length > reg.length - offset)
      return mrcache::ErrnoStatus(EINVAL, "out of range");
    std::lock_guard<std::mutex> lock(mu_);
    if (reg.handle >= stale_from_) {
      sink_.assign(static_cast<const char*>(src), static_cast<const char*>(src) + length);
    } else {
      std::memcpy(static_cast<char*>(reg.addr) + offset, src, length);
    }
    return absl::OkStatus();
  }
  // Every registration made from now on behaves as stale.
  void MarkFutureStale() {
    std::lock_guard<std::mutex> lock(mu_);
    stale_from_ = next_handle_ + 1;
  }
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }

 private:
  mutable std::mutex mu_;
  uint64_t next_handle_ = 0;
  uint64_t stale_from_ = UINT64_MAX;
  std::set<uint64_t> live_;
  std::vector<char> sink_;
};

}  // namespace mrbench

#endif  // TESTS_BENCH_TEST_REGISTRAR_H_
