// eviction.h: which cached region an eviction takes, and which misses a
// full cache admits.
//
// Contract. The cache (CacheImpl) owns the index, the references and the
// lock; an EvictionPolicy owns the order of the cached regions and answers
// one question: which unused region goes next. It never removes a region
// from the index, marks a slot or deregisters anything: the cache does that
// with the region it is given (reclamation), then tells the policy that the
// region left (Removed). The cache tells the policy every change of the set
// of cached regions (Installed, Removed) and every write-locked use of one
// (Touched); lock-free and read-locked hits are not told: they stamp their
// thread's slot, and the policy learns of them only by asking Use, when it
// looks at a candidate victim. Every call is made with the cache's lock held
// exclusively; nothing here is called on the hit path.
//
// A policy keeps its order in the Regions themselves (region.h: lru_prev /
// lru_next, size_prev / size_next / size_class, lru_stamp, install_stamp,
// periods_used); those fields are the policy's alone while the region is
// cached. It allocates nothing after construction.
#ifndef MRCACHE_CORE_EVICTION_H_
#define MRCACHE_CORE_EVICTION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mrcache/core/dcheck.h"
#include "mrcache/core/region.h"
#include "mrcache/core/seen_filter.h"
#include "mrcache/core/size_classes.h"

namespace mrcache {

class EvictionPolicy {
 public:
  // What the cache knows of a region's use that the policy does not: its
  // references and the stamps of the threads' slots.
  class Use {
   public:
    // True if r holds no reference and was not hit since r->lru_stamp, the
    // tick at which the policy last placed it.
    virtual bool UnusedSincePlaced(const Region* r) = 0;

   protected:
    ~Use() = default;
  };

  // What an eviction is for: fewer regions (max_regions, flush) or fewer
  // bytes (max_bytes is not it: that counts as regions; the pin budget and
  // a registrar's refusal are).
  enum class Goal { kRegions, kBytes };

  // One eviction: the goal, the current tick (what a region placed again is
  // stamped with) and how many more regions it may look at before it gives
  // up (every look either takes a region or places one again).
  struct Pass {
    Goal goal = Goal::kRegions;
    uint64_t tick = 0;
    size_t steps_left = 0;
    Use* use = nullptr;
  };

  virtual ~EvictionPolicy() = default;

  // r was indexed at `tick` (r->parts and, for a merge union, whatever
  // Merged carried over are set).
  virtual void Installed(Region* r, uint64_t tick) = 0;
  // The union r replaced `part` (called before Installed(r)).
  virtual void Merged(Region* r, const Region* part) = 0;
  // A write-locked get handed r out at `tick`.
  virtual void Touched(Region* r, uint64_t tick) = 0;
  // r left the index (invalidated, merged, evicted or flushed).
  virtual void Removed(Region* r) = 0;
  // Forgets every region without touching them (the cache frees them all).
  virtual void Clear() = 0;

  // The most regions an eviction over `regions` cached ones looks at.
  virtual size_t StepsFor(size_t regions) const = 0;
  // The region the pass takes next, or nullptr if it found none within its
  // steps. The victim stays in the policy's order until Removed(victim).
  virtual Region* NextVictim(Pass* pass) = 0;
  // From now on evictions for bytes happen (the pin budget binds, or the
  // registrar refused for lack of memory).
  virtual void ExpectEvictionsForBytes() = 0;

  // Whether a miss that found the cache full by count, that the pin budget
  // has room for and that would register exactly its pages
  // [first_page, end_page) is cached (true) or served by a registration of
  // its own (false). Called once for each such miss. The pages are numbered
  // from the address modulo 2^kHashedAddressBits (hashed_address.h): keys
  // for a table, the same in any run whose buffers lie alike modulo that.
  virtual bool AdmitsToFullCache(uint64_t first_page, uint64_t end_page) = 0;
  // False if AdmitsToFullCache answers true whatever it is asked: then a
  // miss of a full cache is not weighed for admission at all.
  virtual bool MayRefuseAdmission() const { return true; }
};

// The cache's policy: generalised CLOCK over an LRU list, with periods of
// use, and a largest-first choice among never-reused regions when bytes are
// short; admission at the second miss of a page range for a full cache of at
// least kAdmissionMinRegions regions.
//
// CLOCK: a region hit since it was last placed (the Use probe) goes back to
// the head and earns one period of use (periods_used, at most
// kMaxPeriodsUsed). For regions, one found unused spends a period and goes
// back to the head, and is evicted only with none left: a region used in
// many periods outlives several passes that a region used once does not.
// For bytes the periods are not spent: the largest region not used since it
// was installed goes before the tail (LargestUnused), as one large region
// frees the bytes of several small ones and costs one registration if it
// comes back; periods there would keep large regions that hold the budget.
//
// Admission. With max_regions of at least kAdmissionMinRegions, a first
// miss (AdmitsToFullCache) is cached only if its pages were such a miss
// within the last 1 to 2 windows of kAdmissionWindow x max_regions of them
// (a SeenFilter, 16 bits per miss in each of its two bitsets); otherwise it
// gets a registration of its own, deregistered at put. Pages asked for once
// (a scan, a cold key) then do not push out regions used again and again;
// pages that come back are cached at their second miss. Smaller caches keep
// every miss (the window would be a handful of misses).
class ClockEviction final : public EvictionPolicy {
 public:
  static constexpr uint8_t kMaxPeriodsUsed = 3;
  static constexpr size_t kAdmissionMinRegions = 64;
  static constexpr size_t kAdmissionWindow = 2;
  static constexpr size_t kAdmissionMaxBits = size_t{1} << 18;

  explicit ClockEviction(size_t max_regions);

  // Defined here, inline: a cache with this policy calls them directly
  // (CacheImpl::WithPolicy), on every miss.
  void Installed(Region* r, uint64_t tick) override {
    MRCACHE_DCHECK(r->lru_prev == nullptr && r->lru_next == nullptr && lru_head_ != r);
    r->lru_stamp = tick;
    r->install_stamp = tick;
    PushFront(r);
    if (by_size_) unreused_.PushNewest(r, Weight(r));
  }
  void Merged(Region* r, const Region* part) override {
    // A union keeps the use its parts had earned.
    if (part->periods_used > r->periods_used) r->periods_used = part->periods_used;
  }
  void Touched(Region* r, uint64_t tick) override { PlaceUsed(r, tick); }
  void Removed(Region* r) override {
    Unlink(r);
    unreused_.Remove(r);
  }
  void Clear() override;
  // Each region is placed again at most kMaxPeriodsUsed + 1 times before it
  // is taken.
  size_t StepsFor(size_t regions) const override { return regions * (kMaxPeriodsUsed + 2) + 1; }
  Region* NextVictim(Pass* pass) override { return NextVictimBy(pass, pass->use); }
  // NextVictim asking `use` (pass->use, as its own type): a cache whose
  // probe is a final class calls this, and the probe, directly, inlined
  // into its eviction (a call of its own on every miss of a full cache).
  template <typename UseT>
  inline __attribute__((always_inline)) Region* NextVictimBy(Pass* pass, UseT* use) {
    while (lru_tail_ != nullptr && pass->steps_left > 0) {
      --pass->steps_left;
      Region* r = lru_tail_;
      MRCACHE_DCHECK(r->state == RegionState::kCached);  // the list holds indexed regions only
      if (!use->UnusedSincePlaced(r)) {
        if (r->periods_used < kMaxPeriodsUsed) ++r->periods_used;
        PlaceUsed(r, pass->tick);
        continue;
      }
      if (pass->goal == Goal::kRegions && r->periods_used > 0) {
        --r->periods_used;
        Requeue(r);
        continue;
      }
      return pass->goal == Goal::kBytes ? LargestUnused(r, pass) : r;
    }
    return nullptr;
  }
  void ExpectEvictionsForBytes() override { by_size_ = true; }
  bool AdmitsToFullCache(uint64_t first_page, uint64_t end_page) override;
  // Inline, like the calls above: every miss of a full cache asks first.
  bool MayRefuseAdmission() const override { return admission_; }

  // The bits of the admission filter for max_regions.
  static size_t AdmissionBits(size_t max_regions);
  // What an eviction for bytes weighs r by: its bytes per part (region.h),
  // at least 1.
  static size_t Weight(const Region* r) {
    const size_t w = r->length() / r->parts;
    return w != 0 ? w : 1;
  }
  const Region* lru_tail() const { return lru_tail_; }
  const Region* lru_head() const { return lru_head_; }

 private:
  // Places r at the head as used: a new stamp, and out of unreused_.
  void PlaceUsed(Region* r, uint64_t tick) {
    r->lru_stamp = tick;
    unreused_.Remove(r);  // placed again: reused
    Requeue(r);
  }
  // Moves r to the head without a new stamp: unused since placed stays true
  // (an eviction pass that spends one of its periods_used).
  void Requeue(Region* r) {
    if (lru_head_ == r) return;
    Unlink(r);
    PushFront(r);
  }
  void PushFront(Region* r) {
    r->lru_prev = nullptr;
    r->lru_next = lru_head_;
    if (lru_head_ != nullptr) lru_head_->lru_prev = r;
    lru_head_ = r;
    if (lru_tail_ == nullptr) lru_tail_ = r;
  }
  void Unlink(Region* r) {
    Region* const prev = r->lru_prev;
    Region* const next = r->lru_next;
    if (prev != nullptr) prev->lru_next = next;
    if (next != nullptr) next->lru_prev = prev;
    // Selects rather than branches: an eviction unlinks the tail.
    lru_head_ = lru_head_ == r ? next : lru_head_;
    lru_tail_ = lru_tail_ == r ? prev : lru_tail_;
    r->lru_prev = r->lru_next = nullptr;
  }
  // The region a pass for bytes takes given that `tail` is unused and not
  // hit since placed: the first unused region of unreused_ in a size class
  // above the tail's (the largest class first, oldest first in each), else
  // `tail`. A region of unreused_ found used since it was installed goes to
  // the head with a period of use, as a pass at the tail would send it.
  Region* LargestUnused(Region* tail, Pass* pass);

  Region* lru_head_ = nullptr;  // most recently placed
  Region* lru_tail_ = nullptr;
  // Where evictions for bytes look first: the cached regions installed while
  // by_size_ held and not placed at the head since (lru_stamp ==
  // install_stamp), by weight. by_size_ holds from the first
  // ExpectEvictionsForBytes: a cache without a budget pays nothing for the
  // lists, and the regions it installed before are evicted for bytes only
  // from the tail.
  SizeClassLists<Region> unreused_;
  bool by_size_ = false;
  const bool admission_;  // max_regions >= kAdmissionMinRegions
  SeenFilter seen_misses_;
};

// The policy a cache of `max_regions` gets unless it is given another.
std::unique_ptr<EvictionPolicy> MakeDefaultEvictionPolicy(size_t max_regions);

}  // namespace mrcache

#endif  // MRCACHE_CORE_EVICTION_H_
