// counting_registrar.h: a Registrar decorator that measures what passes through.
//
// Every configuration mrbench compares (none, mrcache, ucx) talks to the same
// kind of registrar through this wrapper, so registrations, registered bytes,
// registrar time and pinned bytes are counted the same way for all of them,
// independently of what each cache reports about itself.
//
// Registrar time is split by thread: registrar_ns is what the workload's
// thread (the one that made the wrapper) spent in the registrar, on the
// application's path; background_registrar_ns what other threads spent
// (mrcache's deregistration thread, async_dereg), off it;
// background_deregistrations counts the deregistrations those threads made.
//
// Invariants: pinned_bytes == sum of lengths registered and not yet
// deregistered; peak_pinned_bytes >= pinned_bytes at every moment; the
// counters are updated atomically, so the wrapper stays thread-safe if the
// inner registrar is. Counters live in a shared RegistrarCounters so that they
// outlive a wrapper owned by a cache.
#ifndef BENCH_COUNTING_REGISTRAR_H_
#define BENCH_COUNTING_REGISTRAR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "mrcache/forwarding_registrar.h"
#include "mrcache/registrar.h"

namespace mrbench {

struct RegistrarCounters {
  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> deregistrations{0};
  std::atomic<uint64_t> registered_bytes{0};  // total over all registrations
  std::atomic<uint64_t> registrar_ns{0};  // time inside Register and Deregister, workload thread
  std::atomic<uint64_t> background_registrar_ns{0};     // the same, other threads
  std::atomic<uint64_t> background_deregistrations{0};  // deregistrations made by other threads
  std::atomic<uint64_t> pinned_bytes{0};
  std::atomic<uint64_t> peak_pinned_bytes{0};
};

class CountingRegistrar : public mrcache::ForwardingRegistrar {
 public:
  CountingRegistrar(std::unique_ptr<mrcache::Registrar> inner,
                    std::shared_ptr<RegistrarCounters> counters)
      : ForwardingRegistrar(std::move(inner)), counters_(std::move(counters)) {}

  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override;
  absl::Status Deregister(const mrcache::Registration& reg) override;

  const RegistrarCounters& counters() const { return *counters_; }

 private:
  // Adds the time since `start` to the counter of the calling thread's kind;
  // true if that is a thread other than the workload's.
  bool CountTime(uint64_t start);

  std::shared_ptr<RegistrarCounters> counters_;
  const std::thread::id workload_thread_ = std::this_thread::get_id();
};

// Monotonic nanoseconds (CLOCK_MONOTONIC).
uint64_t NowNs();

}  // namespace mrbench

#endif  // BENCH_COUNTING_REGISTRAR_H_
