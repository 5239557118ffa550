// fake_registrar.h: a Registrar for cache tests that counts every call, keeps
// the set of live registrations, and fails on demand.
//
// DeviceWrite copies through the CPU mapping (no pinning); tests that need the
// stale-registration oracle use the uring registrar instead.
#ifndef MRCACHE_TESTS_CACHE_FAKE_REGISTRAR_H_
#define MRCACHE_TESTS_CACHE_FAKE_REGISTRAR_H_

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrcache {
namespace testing {

struct FakeRegistrarState {
  std::mutex mu;
  std::map<uint64_t, Registration> live;  // by handle
  std::atomic<int> registrations{0};
  std::atomic<int> deregistrations{0};
  std::atomic<int> fail_next{0};       // errno for the next Register (0: none)
  std::atomic<int> fail_count{0};      // how many Registers fail with fail_next
  std::function<void(void*, size_t)> on_register;  // runs inside Register, no lock held
  uint64_t next_handle = 1;
};

class FakeRegistrar : public Registrar {
 public:
  explicit FakeRegistrar(std::shared_ptr<FakeRegistrarState> state) : state_(std::move(state)) {}
  const char* name() const override { return "fake"; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (length == 0) return ErrnoStatus(EINVAL, "fake: length 0");
    absl::Status ok = ValidateAccess(access);
    if (!ok.ok()) return ok;
    if (state_->on_register) state_->on_register(addr, length);
    if (state_->fail_count.load() > 0) {
      state_->fail_count.fetch_sub(1);
      return ErrnoStatus(state_->fail_next.load(), "fake: injected failure");
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = state_->next_handle++;
    reg.lkey = static_cast<uint32_t>(reg.handle * 2);
    reg.rkey = static_cast<uint32_t>(reg.handle * 2 + 1);
    state_->live[reg.handle] = reg;
    state_->registrations.fetch_add(1);
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->live.erase(reg.handle) != 1) return ErrnoStatus(EINVAL, "fake: unknown handle");
    state_->deregistrations.fetch_add(1);
    return absl::OkStatus();
  }

  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    std::memcpy(static_cast<char*>(reg.addr) + offset, src, length);
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<FakeRegistrarState> state_;
};

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_FAKE_REGISTRAR_H_
