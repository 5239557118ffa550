// invalidation_ring.h: bounded, preallocated storage for ranges reported by
// memory hooks, drained later by the cache under its lock.
//
// Producers (hooks, any thread, possibly re-entrant) call Push: no allocation,
// no lock, lock-free; every kCapacity / 4 ranges (and on overflow) Push
// asks for a drain (the cache then makes its threads' next gets take the
// slow path, which drains). A consumer (one at a time: the cache lock) calls Drain.
// If a producer finds its slot still occupied (the ring is full), it merges
// its range into the lost hull instead: one word holding the 2 MiB-aligned
// hull of every range that found no slot (a compare-exchange loop). The next
// Drain hands that hull to the consumer as one more range: memory stays
// bounded, no released range is ever lost, and a burst of unrelated releases
// (a busy allocator) coarsens only what lies around them instead of
// invalidating everything.
//
// Slot protocol (per slot, `seq`): seq == t means "free for ticket t";
// seq == t + 1 means "ticket t written". A producer claims ticket t (advances
// head from t to t + 1) only while slot t is free, so every claimed ticket is
// written a few instructions later; the consumer waits for it (yielding), and
// frees the slot for the next round by storing t + kCapacity. A producer that
// finds the slot at head still occupied from the previous lap (seq < ticket)
// merges into the lost hull instead; one that finds it claimed in this lap
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

  // Hook context. Never blocks, never allocates. Returns true when the
  // consumer should drain soon: this range completed another quarter of the
  // ring's capacity (counted since the ring was created), or found it full.
  bool Push(uintptr_t start, uintptr_t end) noexcept {
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
        MergeLost(start, end);
        return true;
      }
      if (head_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        s.start.store(start, std::memory_order_relaxed);
        s.end.store(end, std::memory_order_relaxed);
        s.seq.store(ticket + 1, std::memory_order_release);
        return (ticket + 1) % (kCapacity / 4) == 0;
      }
    }
  }

  // Consumer (one at a time). Calls fn(start, end) for every pushed range not
  // yet drained, in order, then once for the lost hull if some range found
  // no slot (a range covering all of those, aligned to kLostGrain). Returns
  // true in that case.
  template <typename Fn>
  bool Drain(Fn&& fn) {
    // A plain load first: nothing lost is the common case, and an exchange
    // would write the shared line on every drain (a miss drains twice).
    // Seeing kNoneLost is the exchange that found it and stored it back.
    uint64_t lost = lost_.load(std::memory_order_acquire);
    if (lost != kNoneLost) lost = lost_.exchange(kNoneLost, std::memory_order_acq_rel);
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
    if (lost == kNoneLost) return false;
    const uint64_t lo = lost >> 32, hi = lost & 0xffffffffu;
    fn(static_cast<uintptr_t>(lo << kLostShift),
       hi == kTopGrain ? UINTPTR_MAX : static_cast<uintptr_t>((hi + 1) << kLostShift));
    return true;
  }

  // True if nothing was pushed since the last Drain.
  bool empty() const {
    return tail_ == head_.load(std::memory_order_acquire) &&
           lost_.load(std::memory_order_acquire) == kNoneLost;
  }

  // Whether a range pushed since the last Drain, or the lost hull, may
  // overlap [start, end). The caller excludes Drain (a reader of the cache
  // lock; only writers drain), so the waiting ranges stay put. True if one
  // overlaps, if a claimed ticket is not written yet, if more than
  // `max_scan` wait, or if a range was lost; false means none of the ranges
  // pushed before this call overlaps [start, end).
  bool MayOverlapPending(uintptr_t start, uintptr_t end, uint64_t max_scan) const {
    if (lost_.load(std::memory_order_acquire) != kNoneLost) return true;
    const uint64_t head = head_.load(std::memory_order_acquire);
    if (head - tail_ > max_scan) return true;
    for (uint64_t t = tail_; t < head; ++t) {
      const Slot& s = slots_[t % kCapacity];
      if (s.seq.load(std::memory_order_acquire) != t + 1) return true;  // being written
      if (s.start.load(std::memory_order_relaxed) < end &&
          start < s.end.load(std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }

  // The granularity of the lost hull.
  static constexpr uintptr_t kLostGrain = uintptr_t{1} << 21;

 private:
  struct Slot {
    std::atomic<uint64_t> seq;
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };

  // The lost hull packs the first and the last kLostGrain-sized grain it
  // covers (32 bits each: grains of addresses below 2^53) into one word,
  // first << 32 | last; kTopGrain as the last grain means "to the end of the
  // address space". kNoneLost (first > last) is the empty hull.
  static constexpr int kLostShift = 21;
  static constexpr uint64_t kTopGrain = 0xffffffffu;
  static constexpr uint64_t kNoneLost = uint64_t{0xffffffffu} << 32;

  void MergeLost(uintptr_t start, uintptr_t end) noexcept {
    uint64_t lo = start >> kLostShift;
    if (lo > kTopGrain - 1) lo = kTopGrain - 1;  // wider is safe
    uint64_t hi = end == 0 ? 0 : (end - 1) >> kLostShift;
    if (hi > kTopGrain - 1) hi = kTopGrain;
    uint64_t cur = lost_.load(std::memory_order_relaxed);
    for (;;) {
      uint64_t clo = cur >> 32, chi = cur & 0xffffffffu;
      uint64_t nlo = cur == kNoneLost || lo < clo ? lo : clo;
      uint64_t nhi = cur == kNoneLost || hi > chi ? hi : chi;
      uint64_t want = nlo << 32 | nhi;
      if (want == cur) return;
      if (lost_.compare_exchange_weak(cur, want, std::memory_order_acq_rel,
                                      std::memory_order_relaxed)) {
        return;
      }
    }
  }

  Slot slots_[kCapacity];
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) uint64_t tail_ = 0;  // consumer only
  alignas(64) std::atomic<uint64_t> lost_{kNoneLost};
};

}  // namespace mrcache

#endif  // MRCACHE_INVALIDATION_RING_H_
