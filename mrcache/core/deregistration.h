// deregistration.h: what becomes of a registration once it left the cache
// for good -- the registrar's deregistration (timed and counted), the
// monitor's unwatch, the retire callback, and the quarantine of its Region
// -- inline on the calling thread or handed to the process's deregistration
// queue (deregistration_queue.h, config keys async_dereg and
// async_dereg_bytes, async_dereg_invalidated_bytes); and the waits for the
// queue.
//
// Contract. The cache decides what dies (reclaim.h: a killed Region is out
// of the index, referenced by nobody and named by no live slot) and hands
// the dead here, outside its lock, on a DeadList. Deregistration owns the
// retire callback, the quarantine of deregistered Regions and this cache's
// lane of the queue; it calls the registrar (timed_registrar.h), the monitor,
// the pin budget and the queue, and nothing of the cache. A Region may be named by a stale
// lookup entry until the cache voids every entry (cache_impl.h, "Address
// reuse"): so each batch of kQuarantineBatch deregistered Regions is handed
// to the caller's `end_batch`, which voids the entries under the cache's lock
// and keeps or frees the batch (spare_regions.h); no Region leaves the
// quarantine otherwise while the cache is in use.
//
// Thread-safe: any thread, holding no lock of the cache (the queue's worker
// calls in too), except Configure: the cache's creation calls it, before any
// other thread can reach the cache, and again as it learns the monitor, the
// budget and the queue's lane.
#ifndef MRCACHE_CORE_DEREGISTRATION_H_
#define MRCACHE_CORE_DEREGISTRATION_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "mrcache/cache.h"
#include "mrcache/core/deregistration_queue.h"
#include "mrcache/core/reclaim.h"
#include "mrcache/core/region.h"
#include "mrcache/core/timed_registrar.h"
#include "mrcache/internal/mutex.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache {

// Frees every Region of `list` (linked through next_dead) without
// deregistering it.
void FreeRegions(Region* list);

class Deregistration {
 public:
  // Deregistered Regions kept from reuse until this many are.
  static constexpr uint64_t kQuarantineBatch = 256;

  // What a deregistration uses.
  struct Setup {
    // Deregisters through it (timed and counted).
    TimedRegistrar* registrar = nullptr;
    // Unwatches each dead region's range if watch_ranges (monitor.h).
    MonitorLease* monitor = nullptr;
    bool watch_ranges = false;
    // The process's pin budget, null if regions pin nothing.
    PinBudget* budget = nullptr;
    // This cache's lane of the queue; null with async_dereg off.
    DeregistrationQueue::Lane* lane = nullptr;
    // Batches of fewer registered bytes are deregistered by their caller,
    // unless their Regions whose memory is gone hold at least
    // async_invalidated_bytes and the pin budget (if any) is at most half
    // used: the queue keeps a registration pinned until it is deregistered,
    // and a miss short of budget would wait for it. A batch holding a Region
    // that mrc_invalidate took out is always deregistered by its caller
    // (Invalidation::kByCaller).
    size_t async_bytes = 0;
    size_t async_invalidated_bytes = 0;
  };
  // Called with a batch of deregistered Regions whose quarantine ended
  // (linked through next_dead; possibly null when threads ended batches at
  // once): the caller voids every lookup entry that may name them, then
  // keeps or frees them.
  using EndBatch = absl::FunctionRef<void(Region* batch)>;

  Deregistration() = default;
  Deregistration(const Deregistration&) = delete;
  Deregistration& operator=(const Deregistration&) = delete;

  void Configure(const Setup& setup) { setup_ = setup; }
  DeregistrationQueue::Lane* lane() const { return setup_.lane; }

  // Hands the regions of `dead` to the queue (with a lane, and worth it:
  // Setup::async_bytes) or, if there is none, it is full or they are not
  // worth it, deregisters, reports and quarantines them now. `dead` is empty on
  // return. Inline: most calls find the list empty.
  void Deregister(DeadList* dead, EndBatch end_batch) {
    if (dead->head != nullptr) DeregisterDead(dead, end_batch);
  }
  // The same on the calling thread, whose pages must come back now.
  void DeregisterNow(DeadList* dead, EndBatch end_batch) {
    if (dead->head != nullptr) DeregisterDeadNow(dead, end_batch);
  }
  // Before a miss registers `need` bytes: Deregister, unless the pin budget
  // lacks room for them beside what is still pinned; then the victims are
  // deregistered now and, if room is still missing, the queue is waited for
  // (its registrations stay pinned until deregistered).
  void DeregisterBeforeRegistering(DeadList* dead, size_t need, EndBatch end_batch);

  // Waits until the queue has deregistered every region this lane gave it
  // so far (nothing to wait for without a lane), counting the time in
  // wait_ns().
  void WaitForDeregistrations();
  // The same for every cache's regions; the bytes deregistered meanwhile.
  size_t WaitForAllDeregistrations();
  // Nanoseconds spent in those waits that had something to wait for.
  uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }
  // This lane's figures in the queue: Regions waiting or being deregistered
  // now, and the background thread's time deregistering them (zeros without
  // a lane).
  DeregistrationQueue::LaneFigures queue_figures() const;

  // Reports every region deregistered from now on to `callback` (none if
  // empty); cache.h states where it runs.
  void SetRetireCallback(Cache::RetireCallback callback);

  // The quarantined Regions, taken out (the cache's end, when no thread
  // uses it any more).
  Region* TakeQuarantined() { return quarantine_.exchange(nullptr); }

 private:
  void DeregisterDead(DeadList* dead, EndBatch end_batch);
  // Whether `dead` is worth handing to the queue (Setup::async_bytes).
  bool WorthHandingOver(const DeadList& dead) const;
  void DeregisterDeadNow(DeadList* dead, EndBatch end_batch);
  // DeregisterDeadNow when a retire callback is set: DeregisterEach with a
  // copy of it.
  __attribute__((noinline)) void DeregisterDeadReporting(DeadList* dead, EndBatch end_batch);
  // Deregisters, stops watching, reports to `cb` (if not null) and
  // quarantines each region of `dead`, which is not empty.
  inline void DeregisterEach(DeadList* dead, const Cache::RetireCallback* cb, EndBatch end_batch);
  // Keeps the deregistered r from reuse until a batch of kQuarantineBatch is
  // complete, then ends the batch.
  void Quarantine(Region* r, EndBatch end_batch);
  void CountWaitSince(std::chrono::steady_clock::time_point t0);

  Setup setup_;
  std::atomic<uint64_t> wait_ns_{0};
  // Deregistered Regions in quarantine, linked through next_dead, and their
  // number.
  std::atomic<Region*> quarantine_{nullptr};
  std::atomic<uint64_t> quarantined_{0};
  Mutex callback_mu_;
  Cache::RetireCallback retire_cb_ ABSL_GUARDED_BY(callback_mu_);  // copied out before calling
  // Whether retire_cb_ is set: the callback is copied only then, so that a
  // deregistration without one takes no lock.
  std::atomic<bool> has_retire_cb_{false};
};

}  // namespace mrcache

#endif  // MRCACHE_CORE_DEREGISTRATION_H_
