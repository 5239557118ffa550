#include "mrcache/memory_events.h"

#include <atomic>
#include <cerrno>
#include <mutex>

#include "mrcache/errno_status.h"

namespace mrcache {
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

void UnlockListenersAfterFork(bool in_child) noexcept {
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

void ReportMemoryRelease(const void* addr, size_t length) noexcept {
  if (length == 0) return;
  g_reports.fetch_add(1, std::memory_order_relaxed);
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = start + length;
  if (end < start) end = UINTPTR_MAX;
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

uint64_t MemoryReleaseReportCount() noexcept {
  return g_reports.load(std::memory_order_relaxed);
}

}  // namespace mrcache
