// counting_registrar.h: a Registrar decorator for tests. It wraps any real
// registrar (sim, uring, verbs), counts every call, keeps the set of live
// registrations, runs an optional hook inside Register (no cache lock is held
// there: the hook may allocate, unmap or call back into the cache), and fails
// on demand with a chosen errno (fault injection).
#ifndef MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_
#define MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_

#include <atomic>
#include <cerrno>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrcache {
namespace testing {

struct RegistrarCounters {
  std::mutex mu;
  std::map<uint64_t, Registration> live;  // by handle
  std::atomic<int> registrations{0};
  std::atomic<int> deregistrations{0};
  std::atomic<int> fail_errno{0};  // errno for injected failures
  std::atomic<int> fail_count{0};  // how many Registers fail with it
  std::function<void(void*, size_t)> on_register;
};

class CountingRegistrar : public Registrar {
 public:
  CountingRegistrar(std::unique_ptr<Registrar> inner, std::shared_ptr<RegistrarCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}

  const char* name() const override { return inner_->name(); }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (counters_->on_register) counters_->on_register(addr, length);
    if (counters_->fail_count.load() > 0) {
      counters_->fail_count.fetch_sub(1);
      return ErrnoStatus(counters_->fail_errno.load(), "injected registrar failure");
    }
    absl::StatusOr<Registration> reg = inner_->Register(addr, length, access);
    if (reg.ok()) {
      std::lock_guard<std::mutex> lock(counters_->mu);
      counters_->live[reg->handle] = *reg;
      counters_->registrations.fetch_add(1);
    }
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    {
      std::lock_guard<std::mutex> lock(counters_->mu);
      if (counters_->live.erase(reg.handle) != 1) {
        return ErrnoStatus(EINVAL, "deregistration of a handle that is not live");
      }
      counters_->deregistrations.fetch_add(1);
    }
    return inner_->Deregister(reg);
  }

  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    return inner_->DeviceWrite(reg, offset, src, length);
  }
  OdpCapabilities odp_capabilities() const override { return inner_->odp_capabilities(); }
  absl::Status Prefetch(const Registration& reg, void* addr, size_t length) override {
    return inner_->Prefetch(reg, addr, length);
  }

 private:
  std::unique_ptr<Registrar> inner_;
  std::shared_ptr<RegistrarCounters> counters_;
};

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_
