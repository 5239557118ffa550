// recording_listener.h: a MemoryEventListener for tests that records every
// reported range into a preallocated array (no allocation in the hook, as
// memory_events.h requires of listeners).
//
// Invariants: at most kCapacity ranges are kept; later reports are counted in
// overflowed() but not stored. Thread-safe for concurrent reports; Clear()
// must not race with reports the test cares about.
#ifndef TESTS_MONITORS_RECORDING_LISTENER_H_
#define TESTS_MONITORS_RECORDING_LISTENER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mrcache/monitors/memory_events.h"

namespace mrcache {
namespace testing {

class RecordingListener : public MemoryEventListener {
 public:
  static constexpr size_t kCapacity = 4096;

  RecordingListener() { AddMemoryEventListener(this).IgnoreError(); }
  ~RecordingListener() override { RemoveMemoryEventListener(this); }

  void OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept override {
    size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= kCapacity) return;
    ranges_[i].start.store(start, std::memory_order_relaxed);
    ranges_[i].end.store(end, std::memory_order_release);
  }

  // True if a recorded range overlaps [addr, addr + length).
  bool Saw(const void* addr, size_t length) const {
    return SawAddress(reinterpret_cast<uintptr_t>(addr), length);
  }
  // The same, for an address whose memory is gone (no dangling pointer).
  bool SawAddress(uintptr_t s, size_t length) const {
    uintptr_t e = s + length;
    size_t n = count();
    for (size_t i = 0; i < n; ++i) {
      uintptr_t re = ranges_[i].end.load(std::memory_order_acquire);
      uintptr_t rs = ranges_[i].start.load(std::memory_order_relaxed);
      if (rs < e && s < re) return true;
    }
    return false;
  }

  // The i-th recorded range [start, end), i < count().
  struct Recorded {
    uintptr_t start;
    uintptr_t end;
  };
  Recorded at(size_t i) const {
    uintptr_t e = ranges_[i].end.load(std::memory_order_acquire);
    return {ranges_[i].start.load(std::memory_order_relaxed), e};
  }

  size_t count() const {
    size_t n = next_.load(std::memory_order_acquire);
    return n < kCapacity ? n : kCapacity;
  }
  size_t overflowed() const {
    size_t n = next_.load(std::memory_order_acquire);
    return n > kCapacity ? n - kCapacity : 0;
  }
  void Clear() {
    for (auto& r : ranges_) {
      r.start.store(0, std::memory_order_relaxed);
      r.end.store(0, std::memory_order_relaxed);
    }
    next_.store(0, std::memory_order_release);
  }

 private:
  struct Range {
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };
  Range ranges_[kCapacity];
  std::atomic<size_t> next_{0};
};

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_RECORDING_LISTENER_H_
