#include "mrcache/monitors/monitor_sync.h"

#include <sched.h>

namespace mrcache {
namespace monitor_sync_internal {
std::atomic<uint64_t> g_batches_begun{0};
std::atomic<uint64_t> g_batches_ended{0};

void WaitForBatch(uint64_t batch) noexcept {
  // The reader only reads, reports (no allocation, no locks) and ends the
  // batch, so this wait is short; yield rather than burn a shared core.
  while (g_batches_ended.load(std::memory_order_acquire) < batch) sched_yield();
}
}  // namespace monitor_sync_internal

void BeginLateReports() noexcept {
  // seq_cst: ordered before the read(2) that completes the releasing call.
  monitor_sync_internal::g_batches_begun.fetch_add(1, std::memory_order_seq_cst);
}

void EndLateReports() noexcept {
  monitor_sync_internal::g_batches_ended.fetch_add(1, std::memory_order_release);
}

void ForgetUnfinishedBatchesInForkChild() noexcept {
  using namespace monitor_sync_internal;
  g_batches_ended.store(g_batches_begun.load(std::memory_order_relaxed), std::memory_order_release);
}

}  // namespace mrcache
