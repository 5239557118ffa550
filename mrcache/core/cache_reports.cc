// cache_reports.cc: what a cache reports -- its statistics (stats(), the
// counts tests observe) and the error of a request the pin budget could not
// hold, naming the limit and the bytes pinned and in use. Reads counters and
// components; nothing here changes the cache or calls the rest of CacheImpl
// but its lock-held reference sums.
#include <string>

#include "absl/strings/str_cat.h"
#include "mrcache/core/cache_impl.h"
#include "mrcache/core/tick_clock.h"
#include "mrcache/errno_status.h"

namespace mrcache {

CacheStats CacheImpl::stats() {
  CacheStats s;
  uint64_t thread_hits = 0;
  {
    MutexLock lock(&mu_);
    thread_hits = threads_.Hits() + threads_.ReadLockedHits();
  }
  s.hits = thread_hits + slow_hits_.load();
  s.misses = misses_.load();
  // Deregistrations first: each follows its registration, so the difference
  // (the live regions) is never negative.
  s.deregistrations = timed_.deregistrations();
  s.registrations = timed_.registrations();
  s.evictions = evictions_.load();
  s.invalidations = invalidations_.load();
  s.merges = merges_.load();
  s.regions = s.registrations - s.deregistrations;
  s.pinned_bytes = timed_.pinned_bytes();
  s.registrar_ns = TicksToNs(timed_.registrar_ticks());
  s.peak_pinned_bytes = timed_.peak_pinned_bytes();
  s.registrar_failures = registrar_failures_.load() + bypass_.failures();
  s.bypassed = bypass_.bypassed();
  s.remote_private = bypass_.remote_private();
  s.monitor_incomplete = monitor_incomplete_ ? 1 : 0;
  s.pin_budget_bytes = PinBudgetBytes();
  if (monitor_) {
    const WatchFailureCounts w = monitor_->watch_failures();
    s.watch_failures = w.total;
    s.watch_enomem = w.enomem;
    s.watch_ebusy = w.ebusy;
    s.watch_eperm = w.eperm;
    s.watch_einval = w.einval;
    s.watch_map_limit = w.map_limit;
    s.watch_other = w.other;
  }
  const DeregistrationQueue::LaneFigures queue = dereg_.queue_figures();
  s.dereg_queue_depth = queue.depth;
  s.background_dereg_ns = queue.background_ns;
  s.dereg_wait_ns = dereg_.wait_ns();
  return s;
}

uint64_t CacheImpl::read_locked_hits() const {
  MutexLock lock(&mu_);
  return threads_.ReadLockedHits();
}

size_t CacheImpl::thread_table_lines() const {
  const ThreadCache* tc = FindThreadCache(uid_);
  return tc != nullptr ? tc->mask + 1 : 0;
}

size_t CacheImpl::PinBudgetBytes() const {
  if (budget_ == nullptr) return 0;
  size_t b = budget_->budget();
  if (config_.max_bytes != 0 && (b == 0 || config_.max_bytes < b)) b = config_.max_bytes;
  return b;
}

absl::Status CacheImpl::OutOfPinnedMemory(uintptr_t start, uintptr_t end,
                                          const absl::Status& cause) {
  size_t in_use = 0;
  {
    MutexLock lock(&mu_);
    struct Sum {
      const CacheImpl* self;
      size_t bytes;
    } sum{this, 0};
    index_.ForEach([&sum](uintptr_t s, uintptr_t e, Region* r) {
      sum.self->mu_.AssertHeld();  // ForEach runs under the lock taken above
      if (sum.self->TotalRefsLocked(r) > 0) sum.bytes += e - s;
    });
    in_use = sum.bytes;
  }
  const size_t limit = budget_ != nullptr ? budget_->limit() : 0;
  const std::string limit_text =
      limit != 0 ? absl::StrCat("RLIMIT_MEMLOCK is ", limit, " bytes, the pin budget ",
                                PinBudgetBytes(), " bytes")
                 : std::string("RLIMIT_MEMLOCK does not apply (unlimited, or CAP_IPC_LOCK)");
  return ErrnoStatus(
      StatusToErrno(cause),
      absl::StrCat("mrc_get: cannot pin ", end - start, " bytes at 0x", absl::Hex(start), ": ",
                   limit_text, "; mrcache pins ",
                   budget_ != nullptr ? budget_->pinned() : timed_.pinned_bytes(),
                   " bytes in this process, ", in_use, " of them in regions in use by this cache (",
                   registrar_->name(), ": ", cause.message(), ")"));
}

}  // namespace mrcache
