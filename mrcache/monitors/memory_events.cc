#include "mrcache/monitors/memory_events.h"

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <mutex>

#include "mrcache/errno_status.h"

namespace mrcache {
namespace memory_events_internal {
// Fences nest when a hook's call is itself hooked (symbols over patch).
__thread ReleaseFence* tl_fence __attribute__((tls_model("initial-exec")));
}  // namespace memory_events_internal

namespace {

// Each slot: the listener, and how many reports are running inside it.
struct ListenerSlot {
  std::atomic<MemoryEventListener*> listener{nullptr};
  std::atomic<int> active{0};
};

ListenerSlot g_slots[kMaxMemoryEventListeners];
std::atomic<int> g_high_water{0};  // slots [0, g_high_water) may be in use
std::atomic<uint64_t> g_reports{0};
// Serialises Add/Remove only (never taken by a report).
std::mutex& TableMutex() {
  static std::mutex* m = new std::mutex;  // leaked: usable during exit
  return *m;
}

}  // namespace

void LockListenersForFork() noexcept {
  TableMutex().lock();
  int n = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    MemoryEventListener* l = g_slots[i].listener.load(std::memory_order_acquire);
    if (l != nullptr) l->OnForkPrepare();
  }
}

namespace {
void ForgetReleasesInFlight() noexcept;
}  // namespace

void UnlockListenersAfterFork(bool in_child) noexcept {
  // Fenced releases of the parent's other threads never end in the child.
  if (in_child) ForgetReleasesInFlight();
  // Under the table mutex the set of listeners is the one Lock saw.
  int n = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    // The child's only thread is in fork(), not in a report: a nonzero count
    // belongs to a thread of the parent and would make Remove wait forever.
    if (in_child) g_slots[i].active.store(0, std::memory_order_relaxed);
    MemoryEventListener* l = g_slots[i].listener.load(std::memory_order_acquire);
    if (l == nullptr) continue;
    if (in_child) {
      l->OnForkChild();
    } else {
      l->OnForkParent();
    }
  }
  TableMutex().unlock();
}

absl::Status AddMemoryEventListener(MemoryEventListener* listener) {
  if (listener == nullptr) return ErrnoStatus(EINVAL, "null memory event listener");
  std::lock_guard<std::mutex> lock(TableMutex());
  for (int i = 0; i < kMaxMemoryEventListeners; ++i) {
    if (g_slots[i].listener.load(std::memory_order_relaxed) == nullptr) {
      g_slots[i].listener.store(listener, std::memory_order_release);
      if (g_high_water.load(std::memory_order_relaxed) <= i) {
        g_high_water.store(i + 1, std::memory_order_release);
      }
      return absl::OkStatus();
    }
  }
  return ErrnoStatus(ENOSPC, "too many caches listening to memory events");
}

void RemoveMemoryEventListener(MemoryEventListener* listener) {
  std::lock_guard<std::mutex> lock(TableMutex());
  int n = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    ListenerSlot& slot = g_slots[i];
    if (slot.listener.load(std::memory_order_relaxed) != listener) continue;
    slot.listener.store(nullptr, std::memory_order_seq_cst);
    // A report that loaded the pointer before the store above has already
    // raised `active` (it raises before loading); wait for it to leave.
    while (slot.active.load(std::memory_order_seq_cst) != 0) {
    }
  }
}

namespace {

// Ranges of fenced releases under way (ReleaseFence). A slot is claimed by a
// compare-exchange of `busy`, then `start` and `end` are stored (end last);
// a busy slot whose end is still 0 counts as "overlaps everything". Closing
// stores end = 0, then frees the slot. g_open counts open fenced ranges,
// including g_unknown ones that found no free slot, so that the test on the
// miss path is one load when nothing is under way.
struct InFlightSlot {
  std::atomic<bool> busy{false};
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
};
constexpr int kInFlightSlots = 128;
InFlightSlot g_in_flight[kInFlightSlots];
std::atomic<int> g_open{0};
std::atomic<int> g_unknown{0};

int ClaimInFlightSlot(uintptr_t start, uintptr_t end) noexcept {
  for (int i = 0; i < kInFlightSlots; ++i) {
    InFlightSlot& slot = g_in_flight[i];
    bool expected = false;
    if (slot.busy.load(std::memory_order_relaxed) ||
        !slot.busy.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      continue;
    }
    slot.start.store(start, std::memory_order_seq_cst);
    slot.end.store(end, std::memory_order_seq_cst);
    return i;
  }
  return -1;
}

void FreeInFlightSlot(int i) noexcept {
  g_in_flight[i].end.store(0, std::memory_order_seq_cst);
  g_in_flight[i].busy.store(false, std::memory_order_seq_cst);
}

void ForgetReleasesInFlight() noexcept {
  for (InFlightSlot& slot : g_in_flight) {
    slot.end.store(0, std::memory_order_relaxed);
    slot.busy.store(false, std::memory_order_relaxed);
  }
  g_unknown.store(0, std::memory_order_relaxed);
  g_open.store(0, std::memory_order_seq_cst);
}

void Dispatch(uintptr_t start, uintptr_t end) noexcept {
  g_reports.fetch_add(1, std::memory_order_relaxed);
  int n = g_high_water.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    ListenerSlot& slot = g_slots[i];
    if (slot.listener.load(std::memory_order_relaxed) == nullptr) continue;
    slot.active.fetch_add(1, std::memory_order_seq_cst);
    MemoryEventListener* l = slot.listener.load(std::memory_order_seq_cst);
    if (l != nullptr) l->OnMemoryRelease(start, end);
    slot.active.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace

void ReportMemoryRelease(const void* addr, size_t length) noexcept {
  if (length == 0) return;
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = start + length;
  if (end < start) end = UINTPTR_MAX;
  // In flight first, reported second: a miss that the report does not spoil
  // sees the range in flight.
  if (ReleaseFence* fence = memory_events_internal::tl_fence) fence->Add(start, end);
  Dispatch(start, end);
}

void ReleaseFence::Add(uintptr_t start, uintptr_t end) noexcept {
  if (count_ == kMaxFenceRanges) {
    // No slot to name it: mark an unknown range in flight, so that no miss
    // keeps a registration until this fence closes, and report the hull of
    // such ranges again at close.
    if (start < overflow_start_) overflow_start_ = start;
    if (end > overflow_end_) overflow_end_ = end;
    if (overflowed_++ == 0) {
      g_unknown.fetch_add(1, std::memory_order_seq_cst);
      g_open.fetch_add(1, std::memory_order_seq_cst);
    }
    return;
  }
  g_open.fetch_add(1, std::memory_order_seq_cst);
  int slot = ClaimInFlightSlot(start, end);
  if (slot < 0) g_unknown.fetch_add(1, std::memory_order_seq_cst);
  ranges_[count_++] = Range{start, end, slot};
}

void ReleaseFence::Close() noexcept {
  // After: the call has returned, so anything registered over these ranges
  // while it ran is voided by this report before the range leaves flight.
  for (int i = 0; i < count_; ++i) Dispatch(ranges_[i].start, ranges_[i].end);
  if (overflowed_ > 0) Dispatch(overflow_start_, overflow_end_);
  for (int i = 0; i < count_; ++i) {
    if (ranges_[i].slot >= 0) {
      FreeInFlightSlot(ranges_[i].slot);
    } else {
      g_unknown.fetch_sub(1, std::memory_order_seq_cst);
    }
    g_open.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (overflowed_ > 0) {
    g_unknown.fetch_sub(1, std::memory_order_seq_cst);
    g_open.fetch_sub(1, std::memory_order_seq_cst);
  }
}

bool ReleaseInFlight(uintptr_t start, uintptr_t end) noexcept {
  if (g_open.load(std::memory_order_seq_cst) == 0) return false;
  if (g_unknown.load(std::memory_order_seq_cst) != 0) return true;
  for (InFlightSlot& slot : g_in_flight) {
    if (!slot.busy.load(std::memory_order_seq_cst)) continue;
    uintptr_t e = slot.end.load(std::memory_order_seq_cst);
    if (e == 0) return true;  // being claimed: range not known yet
    uintptr_t s = slot.start.load(std::memory_order_seq_cst);
    if (s < end && start < e) return true;
  }
  return false;
}

bool WaitForReleasesInFlight(uintptr_t start, uintptr_t end, uint64_t timeout_ns) noexcept {
  constexpr int kYields = 1000;
  constexpr long kSleepNs = 20'000;
  uint64_t slept = 0;
  for (int i = 0; ReleaseInFlight(start, end); ++i) {
    if (i < kYields) {
      sched_yield();
      continue;
    }
    if (slept >= timeout_ns) return false;
    struct timespec ts = {0, kSleepNs};
    nanosleep(&ts, nullptr);
    slept += kSleepNs;
  }
  return true;
}

uint64_t MemoryReleaseReportCount() noexcept { return g_reports.load(std::memory_order_relaxed); }

}  // namespace mrcache
