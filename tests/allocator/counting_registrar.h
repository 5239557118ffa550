// counting_registrar.h: a registrar for pool tests that remembers every live
// registration, counts calls, and can be told to fail.
//
// Handles are 1, 2, 3, ...; lkey = rkey = handle. Registration never touches
// the memory. Find(handle) lets a test check that a buffer's keys name a
// registration that covers it.
#ifndef MRCACHE_TESTS_ALLOCATOR_COUNTING_REGISTRAR_H_
#define MRCACHE_TESTS_ALLOCATOR_COUNTING_REGISTRAR_H_

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrcache {

class CountingRegistrar : public Registrar {
 public:
  const char* name() const override { return "counting"; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_errno_ != 0) return ErrnoStatus(fail_errno_, "injected registration failure");
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = ++next_handle_;
    reg.lkey = reg.rkey = static_cast<uint32_t>(reg.handle);
    live_[reg.handle] = reg;
    ++registrations_;
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(reg.handle);
    if (it == live_.end()) {
      ++bad_deregistrations_;
      return ErrnoStatus(EINVAL, "deregistration of an unknown handle");
    }
    live_.erase(it);
    ++deregistrations_;
    return absl::OkStatus();
  }

  // Subsequent Register calls fail with `err` (0: succeed again).
  void FailWith(int err) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_errno_ = err;
  }

  // The live registration with this handle, or one with handle 0.
  Registration Find(uint64_t handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(handle);
    return it == live_.end() ? Registration{} : it->second;
  }

  uint64_t registrations() const {
    std::lock_guard<std::mutex> l(mu_);
    return registrations_;
  }
  uint64_t deregistrations() const {
    std::lock_guard<std::mutex> l(mu_);
    return deregistrations_;
  }
  uint64_t bad_deregistrations() const {
    std::lock_guard<std::mutex> l(mu_);
    return bad_deregistrations_;
  }
  size_t live() const {
    std::lock_guard<std::mutex> l(mu_);
    return live_.size();
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, Registration> live_;
  uint64_t next_handle_ = 0;
  uint64_t registrations_ = 0, deregistrations_ = 0, bad_deregistrations_ = 0;
  int fail_errno_ = 0;
};

}  // namespace mrcache

#endif  // MRCACHE_TESTS_ALLOCATOR_COUNTING_REGISTRAR_H_
