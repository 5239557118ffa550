// bypass.h: the gets the cache serves without caching a region for them.
//
// Contract. Bypass makes and counts their registrations: a dedicated
// registration of exactly the requested range, never shared, deregistered at
// its put (Bypass::Acquire, Adopt, Put), and odp=implicit's
// whole-address-space regions (ImplicitOdpRegions), made on first use and
// kept until the cache is destroyed. It calls the registrar through
// TimedRegistrar and nothing of the cache; which gets bypass is the cache's
// decision (CacheImpl::AcquireUncached, AcquireOversized, AcquireSlow,
// ServeUnwatched). OversizedSeen keeps the oversized misses' second sight,
// which the cache consults under its lock.
#ifndef MRCACHE_CORE_BYPASS_H_
#define MRCACHE_CORE_BYPASS_H_

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/core/log2_histogram.h"
#include "mrcache/core/range.h"
#include "mrcache/core/region.h"
#include "mrcache/core/timed_registrar.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/odp.h"

namespace mrcache {

// odp=implicit: one registration of the whole address space per set of
// remote rights (so that its rkey grants exactly what was asked), made on
// first use, and the references got through each. Lock-free: a region is
// published once (Publish) and stays until the cache is destroyed (TakeAll).
class ImplicitOdpRegions {
 public:
  // The set of remote rights `access` asks for: 0 .. kSets - 1.
  static constexpr int kSets = 8;
  static int SetOf(int access) { return (access & kAccessRemoteBits) >> 1; }

  // The region of access's set, or nullptr if none is published yet.
  Region* Find(int access) const { return regions_[SetOf(access)].load(std::memory_order_acquire); }
  // Publishes r as the region of access's set unless another thread did
  // first; returns the region published (r, or the other thread's).
  Region* Publish(int access, Region* r) {
    Region* expected = nullptr;
    if (regions_[SetOf(access)].compare_exchange_strong(expected, r, std::memory_order_acq_rel)) {
      return r;
    }
    return expected;
  }
  // A get through r (a published region): one reference more.
  void CountGet(const Region* r) {
    refs_[SetOf(r->reg.access)].fetch_add(1, std::memory_order_relaxed);
  }
  // A put of r: one reference less, or false (and nothing changed) if r
  // holds none.
  bool CountPut(const Region* r) {
    std::atomic<int64_t>& refs = refs_[SetOf(r->reg.access)];
    if (refs.fetch_sub(1, std::memory_order_relaxed) <= 0) {
      refs.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  // How many of the regions still hold references.
  int Held() const {
    int held = 0;
    for (const auto& refs : refs_) held += refs.load() > 0 ? 1 : 0;
    return held;
  }
  // Unpublishes every region, calling take(r) for each (the cache's end).
  template <typename Take>
  void TakeAll(Take take) {
    for (auto& slot : regions_) {
      if (Region* r = slot.exchange(nullptr)) take(r);
    }
  }

 private:
  std::atomic<Region*> regions_[kSets] = {};
  std::atomic<int64_t> refs_[kSets] = {};
};

// Under a pin budget, the pages of the last kSeen misses served uncached for
// their size: such pages are cached the next time (second sight), so that a
// large buffer reused soon stays registered. Not thread-safe: the cache
// calls it under its lock.
class OversizedSeen {
 public:
  static constexpr int kSeen = 4;

  // True if `pages` was among the last kSeen remembered (and forgets it);
  // else remembers it, forgetting the oldest, and returns false.
  bool SeenAgain(Range pages) {
    for (Range& seen : seen_) {
      if (seen == pages) {
        seen = Range{};
        return true;
      }
    }
    seen_[next_++ % kSeen] = pages;
    return false;
  }

 private:
  Range seen_[kSeen];
  unsigned next_ = 0;
};

// The dedicated and implicit registrations. Thread-safe, lock-free.
class Bypass {
 public:
  // Why a get bypasses the cache: MW_BIND/ZERO_BASED (counted as bypassed),
  // remote rights under remote_keys=private (remote_private), or a miss too
  // large for the pin budget (bypassed; a refusal is not counted as a
  // registrar failure, since the normal path then retries it).
  // Also: a first miss of a full cache (CacheImpl::NotAdmittedLocked;
  // bypassed, and an ENOMEM/EAGAIN refusal sends it down the normal path,
  // which makes room). Also: a miss whose range a monitor could not watch
  // (kUnwatched, counted as bypassed; unwatched_miss.cc).
  enum class Kind { kDedicated, kRemotePrivate, kOversized, kNotAdmitted, kUnwatched };

  struct Setup {
    TimedRegistrar* registrar = nullptr;
    // The cache whose Regions these are (Region::cache).
    CacheImpl* cache = nullptr;
  };

  // Once, before any other call.
  void Configure(const Setup& setup) { setup_ = setup; }

  // A dedicated registration of exactly [start, end), never shared,
  // deregistered at put, counted as `kind` says; the registrar's refusal
  // otherwise.
  absl::StatusOr<Region*> Acquire(uintptr_t start, uintptr_t end, int access,
                                  Kind kind = Kind::kDedicated);
  // The region of a bypass whose registration `reg` of [start, end) is made.
  Region* Adopt(uintptr_t start, uintptr_t end, const Registration& reg, Kind kind);
  // odp=implicit: the region of access's set of remote rights, registered
  // (with local write) on first use.
  absl::StatusOr<Region*> ImplicitRegion(int access);
  ImplicitOdpRegions& implicit() { return implicit_; }
  // A put of r, a bypass or implicit region of this cache: a bypass is
  // deregistered and freed, an implicit region's reference uncounted. EINVAL
  // if r was put more times than it was got.
  absl::Status Put(Region* r);

  uint64_t bypassed() const { return bypassed_.load(); }
  uint64_t remote_private() const { return remote_private_.load(); }
  // Registrar refusals that no normal path retries.
  uint64_t failures() const { return failures_.load(); }

 private:
  Setup setup_;
  ImplicitOdpRegions implicit_;
  std::atomic<uint64_t> bypassed_{0}, remote_private_{0}, failures_{0};
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_BYPASS_H_
