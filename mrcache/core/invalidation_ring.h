// invalidation_ring.h: bounded, preallocated storage for ranges reported by
// memory hooks, drained later by the cache under its lock.
//
// Producers (hooks, any thread, possibly re-entrant) call Push: no allocation,
// no lock, wait-free. A consumer (one at a time: the cache lock) calls Drain.
// If a producer finds its slot still occupied (the ring is full), it sets the
// overflow flag instead; the next Drain then reports `overflowed` and the
// cache falls back to a full invalidation: memory stays bounded and no stale
// range is ever lost.
//
// Slot protocol (per slot, `seq`): seq == t means "free for ticket t";
// seq == t + 1 means "ticket t written". A producer claims ticket t (advances
// head from t to t + 1) only while slot t is free, so every claimed ticket is
// written a few instructions later; the consumer waits for it (yielding), and
// frees the slot for the next round by storing t + kCapacity. A producer that
// finds the slot at head still occupied from the previous lap (seq < ticket)
// sets the overflow flag instead; one that finds it claimed in this lap
// (seq > ticket: another producer won the ticket) reloads head and retries,
// so concurrent producers never report overflow while the ring has room.
#ifndef MRCACHE_INVALIDATION_RING_H_
#define MRCACHE_INVALIDATION_RING_H_

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrcache {

class InvalidationRing {
 public:
  static constexpr uint64_t kCapacity = 1024;

  InvalidationRing() {
    for (uint64_t i = 0; i < kCapacity; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }

  // Hook context. Never blocks, never allocates.
  void Push(uintptr_t start, uintptr_t end) noexcept {
    uint64_t ticket = head_.load(std::memory_order_acquire);
    for (;;) {
      Slot& s = slots_[ticket % kCapacity];
      const uint64_t seq = s.seq.load(std::memory_order_acquire);
      if (seq != ticket) {
        if (seq > ticket) {
          // Another producer claimed this ticket (and maybe wrote it) since
          // we read head: our ticket is stale, not the ring full.
          ticket = head_.load(std::memory_order_acquire);
          continue;
        }
        // seq < ticket: the slot still holds the previous lap's range.
        overflow_.store(true, std::memory_order_release);
        return;
      }
      if (head_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        s.start.store(start, std::memory_order_relaxed);
        s.end.store(end, std::memory_order_relaxed);
        s.seq.store(ticket + 1, std::memory_order_release);
        return;
      }
    }
  }

  // Consumer (one at a time). Calls fn(start, end) for every pushed range not
  // yet drained. Returns true if a range was lost to overflow: the caller must
  // then treat every range as invalid.
  template <typename Fn>
  bool Drain(Fn&& fn) {
    bool lost = overflow_.exchange(false, std::memory_order_acq_rel);
    uint64_t head = head_.load(std::memory_order_acquire);
    for (; tail_ < head; ++tail_) {
      Slot& s = slots_[tail_ % kCapacity];
      // Claimed tickets are always written; the producer is a few
      // instructions away (or preempted: yield to it).
      for (int spins = 0; s.seq.load(std::memory_order_acquire) != tail_ + 1; ++spins) {
        if (spins > 64) sched_yield();
      }
      fn(s.start.load(std::memory_order_relaxed), s.end.load(std::memory_order_relaxed));
      s.seq.store(tail_ + kCapacity, std::memory_order_release);
    }
    return lost;
  }

  bool empty() const {
    return tail_ == head_.load(std::memory_order_acquire) && !overflow_.load(std::memory_order_acquire);
  }

 private:
  struct Slot {
    std::atomic<uint64_t> seq;
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };

  Slot slots_[kCapacity];
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) uint64_t tail_ = 0;  // consumer only
  std::atomic<bool> overflow_{false};
};

}  // namespace mrcache

#endif  // MRCACHE_INVALIDATION_RING_H_
