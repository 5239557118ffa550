// counting_registrar.h: a Registrar decorator for tests. It wraps any real
// registrar (sim, uring, verbs), counts every call, keeps the set of live
// registrations, runs an optional hook inside Register (no cache lock is held
// there: the hook may allocate, unmap or call back into the cache), and fails
// on demand with a chosen errno (fault injection).
//
// Fault injection (tests/reliability uses all of it):
//  - fail_count > 0: the next fail_count Register calls fail with fail_errno.
//  - fail_nth = N > 0: the Nth Register call (counting register_calls, from 1)
//    fails with fail_errno; fail_nth is then cleared.
//  - register_delay_us / deregister_delay_us: every call sleeps that long
//    first (a slow registrar; no cache lock may be held meanwhile).
//  - fail_deregister > 0: the next Deregister calls report an error after
//    releasing the inner registration (the registrar contract: a failed
//    Deregister still counts as released).
// Every injected failure is counted in faults_injected. A failed Register
// never reaches the inner registrar, so it registers nothing.
//
// Ordering (for staleness checks): each successful Register gets a sequence
// number (1, 2, ...) stored in `sequence` by handle; `registered` is the last
// one handed out. A region registered with sequence s was registered before an
// event that happened when `registered` was >= s.
#ifndef MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_
#define MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_

#include <atomic>
#include <cerrno>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <unistd.h>

#include "mrcache/errno_status.h"
#include "mrcache/forwarding_registrar.h"
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
  // Fault injection (see the header comment).
  std::atomic<int> register_calls{0};
  std::atomic<int> fail_nth{0};
  std::atomic<int> fail_deregister{0};
  std::atomic<int> register_delay_us{0};
  std::atomic<int> deregister_delay_us{0};
  std::atomic<int> faults_injected{0};
  // Registration order, by handle (guarded by mu).
  std::map<uint64_t, uint64_t> sequence;
  uint64_t registered = 0;  // guarded by mu
};

class CountingRegistrar : public ForwardingRegistrar {
 public:
  CountingRegistrar(std::unique_ptr<Registrar> inner, std::shared_ptr<RegistrarCounters> counters)
      : ForwardingRegistrar(std::move(inner)), counters_(std::move(counters)) {}

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (counters_->on_register) counters_->on_register(addr, length);
    const int call = counters_->register_calls.fetch_add(1) + 1;
    if (int us = counters_->register_delay_us.load()) usleep(static_cast<useconds_t>(us));
    int nth = call;
    if (counters_->fail_nth.compare_exchange_strong(nth, 0) || TakeOne(counters_->fail_count)) {
      counters_->faults_injected.fetch_add(1);
      return ErrnoStatus(counters_->fail_errno.load(), "injected registrar failure");
    }
    absl::StatusOr<Registration> reg = inner().Register(addr, length, access);
    if (reg.ok()) {
      std::lock_guard<std::mutex> lock(counters_->mu);
      counters_->live[reg->handle] = *reg;
      counters_->sequence[reg->handle] = ++counters_->registered;
      counters_->registrations.fetch_add(1);
    }
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    if (int us = counters_->deregister_delay_us.load()) usleep(static_cast<useconds_t>(us));
    {
      std::lock_guard<std::mutex> lock(counters_->mu);
      if (counters_->live.erase(reg.handle) != 1) {
        return ErrnoStatus(EINVAL, "deregistration of a handle that is not live");
      }
      counters_->sequence.erase(reg.handle);
      counters_->deregistrations.fetch_add(1);
    }
    absl::Status status = inner().Deregister(reg);
    if (TakeOne(counters_->fail_deregister)) {
      counters_->faults_injected.fetch_add(1);
      return ErrnoStatus(EIO, "injected deregistration failure");
    }
    return status;
  }

 private:
  // Decrements `budget` if it is positive; true if it did.
  static bool TakeOne(std::atomic<int>& budget) {
    int n = budget.load();
    while (n > 0 && !budget.compare_exchange_weak(n, n - 1)) {
    }
    return n > 0;
  }

  std::shared_ptr<RegistrarCounters> counters_;
};

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_COUNTING_REGISTRAR_H_
