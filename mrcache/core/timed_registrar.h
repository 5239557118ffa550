// timed_registrar.h: the cache's calls of its registrar, timed and counted:
// registrar time (stats' registrar_ns), registrations and deregistrations,
// the bytes pinned and their peak, the pin budget's account, and the
// sampled latency histograms.
//
// Contract. TimedRegistrar owns those counters; the cache, its miss, its
// bypasses (bypass.h) and its deregistrations (deregistration.h) call the
// registrar only through it, so that every registration is counted once
// (CountRegistration, when its Region is made) and every deregistration
// once (Deregister). It calls the registrar and the pin budget, nothing of
// the cache.
//
// Thread-safe, lock-free (relaxed atomics: stats may read a count a call
// behind). Configure runs once, at the cache's creation, before any call.
#ifndef MRCACHE_CORE_TIMED_REGISTRAR_H_
#define MRCACHE_CORE_TIMED_REGISTRAR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/core/log2_histogram.h"
#include "mrcache/core/tick_clock.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache {

class TimedRegistrar {
 public:
  struct Setup {
    Registrar* registrar = nullptr;
    // The process's pin budget, null if regions pin nothing.
    PinBudget* budget = nullptr;
    bool tsc_ticks = false;  // TickClockIsTsc()
    // The cache's latency histograms (histograms_ in cache_impl.h).
    Log2Histogram* register_ns = nullptr;
    // One deregistration in kHistogramSampleEvery (log2_histogram.h), by
    // the count of deregistrations before it.
    Log2Histogram* deregister_ns = nullptr;
    // One registration in kHistogramSampleEvery, by the count of
    // registrations before it, unless its caller records the size itself
    // (CountRegistrationSampled).
    Log2Histogram* region_bytes = nullptr;
    double ns_per_tick = 1.0;  // NsPerTick()
  };

  // Before any other call; again when the setup grows (the cache's creation
  // learns the budget after its first registration under odp=implicit).
  void Configure(const Setup& setup) { setup_ = setup; }
  Registrar& registrar() const { return *setup_.registrar; }

  // Registers [start, end) with `access`, adding the time to registrar_ticks
  // and either returning it in *ticks (the caller records it) or, with
  // ticks null, recording it in register_ns; a pinning registration is
  // added to the budget's pinned bytes. Inline: the miss calls it, and each
  // frame between the miss and the registrar's system call costs the miss
  // again (cache_impl.h, MRCACHE_MISS_INLINE).
  inline __attribute__((always_inline)) absl::StatusOr<Registration> Register(
      uintptr_t start, uintptr_t end, int access, uint64_t* ticks = nullptr) {
    const uint64_t t0 = NowTicks(setup_.tsc_ticks);
    absl::StatusOr<Registration> reg =
        setup_.registrar->Register(reinterpret_cast<void*>(start), end - start, access);
    const uint64_t took = AddTicksSince(registrar_ticks_, t0, setup_.tsc_ticks);
    if (ticks != nullptr) {
      *ticks = took;  // the caller records it
    } else {
      setup_.register_ns->Add(TicksToNs(took));
    }
    if (reg.ok() && setup_.budget != nullptr && !(reg->access & kAccessOnDemand)) {
      setup_.budget->AddPinned(reg->length);
      setup_.budget->Accepted(reg->length);
    }
    return reg;
  }
  // odp=implicit's registration of the whole address space (odp.h), timed
  // and counted (it pins nothing).
  absl::StatusOr<Registration> RegisterImplicit(int access);
  // Deregisters `reg` now, timing it (and a sample into deregister_ns),
  // counting it and giving its pinned bytes back to the budget; a registrar
  // failure is logged (the registration is gone either way). Inline, as
  // Register: a miss's evictions deregister right after it.
  inline __attribute__((always_inline)) void Deregister(const Registration& reg) {
    const uint64_t t0 = NowTicks(setup_.tsc_ticks);
    absl::Status s = setup_.registrar->Deregister(reg);
    const uint64_t took = AddTicksSince(registrar_ticks_, t0, setup_.tsc_ticks);
    if (__builtin_expect(
            deregistrations_.fetch_add(1, std::memory_order_relaxed) % kHistogramSampleEvery == 0,
            0)) {
      CountDeregistrationNs(took);
    }
    const bool implicit = IsImplicitOdp(reg);
    pinned_bytes_.fetch_sub(implicit ? 0 : reg.length, std::memory_order_relaxed);
    if (!implicit && setup_.budget != nullptr && !(reg.access & kAccessOnDemand)) {
      setup_.budget->SubPinned(reg.length);
    }
    if (!s.ok()) LogFailedDeregistration(s);
  }
  // A registration that became a Region (or was discarded after a miss was
  // spoiled or raced): counted, `pinned_bytes` more pinned (0: the implicit
  // ODP region, which covers no range and has no size); if it is one of the
  // sample, its size goes in region_bytes.
  void CountRegistration(size_t pinned_bytes) {
    if (CountRegistrationSampled(pinned_bytes)) CountRegionBytes(pinned_bytes);
  }
  // CountRegistration for a caller that records the size itself (the miss,
  // under the cache's lock, in its plain histograms): true if it is one of
  // the sample.
  inline __attribute__((always_inline)) bool CountRegistrationSampled(size_t pinned_bytes) {
    const uint64_t before = registrations_.fetch_add(1, std::memory_order_relaxed);
    AtomicMax(peak_pinned_bytes_,
              pinned_bytes_.fetch_add(pinned_bytes, std::memory_order_relaxed) + pinned_bytes);
    return __builtin_expect(before % kHistogramSampleEvery == 0, 0) && pinned_bytes != 0;
  }

  uint64_t registrations() const { return registrations_.load(); }
  uint64_t deregistrations() const { return deregistrations_.load(); }
  uint64_t pinned_bytes() const { return pinned_bytes_.load(); }
  uint64_t peak_pinned_bytes() const { return peak_pinned_bytes_.load(); }
  // Registrar time, in NowTicks() units.
  uint64_t registrar_ticks() const { return registrar_ticks_.load(); }

 private:
  static void AtomicMax(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load(std::memory_order_relaxed);
    while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  __attribute__((cold, noinline)) void LogFailedDeregistration(const absl::Status& failure) const;
  // The sampled recordings, out of line: a registration or deregistration
  // that is not sampled carries none of their code.
  __attribute__((cold, noinline)) void CountRegionBytes(size_t bytes);
  __attribute__((cold, noinline)) void CountDeregistrationNs(uint64_t ticks);

  Setup setup_;
  std::atomic<uint64_t> registrations_{0}, deregistrations_{0}, pinned_bytes_{0},
      peak_pinned_bytes_{0}, registrar_ticks_{0};
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_TIMED_REGISTRAR_H_
