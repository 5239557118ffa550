// reclaim.cc: settling, killing and the retired list (reclaim.h).
#include "mrcache/core/reclaim.h"

#include "mrcache/core/dcheck.h"
#include "mrcache/core/fences.h"

namespace mrcache {

void Reclaim::Settle(Region* candidates, DeadList* dead) {
  // The candidates' slots are marked kRetired (Retire): after the fence, a
  // hit either sees the mark or is seen in the sums below. Where no other
  // thread has a slot naming a candidate, none can hit or put it without
  // the lock (slots are claimed only under it), and the fence (an interrupt
  // of every CPU running the process) is skipped.
  if (needs_fence_) ReclaimerFence();
  needs_fence_ = false;
  while (candidates != nullptr) {
    Region* r = candidates;
    candidates = r->next_dead;
    r->next_dead = nullptr;
    if (threads_.TotalRefs(r) == 0) {
      Kill(r, dead);
    } else {
      LinkRetired(r);
    }
  }
}

void Reclaim::Kill(Region* r, DeadList* dead) {
  // Only a region with no reference left is deregistered.
  MRCACHE_DCHECK(r->state != RegionState::kDead && threads_.TotalRefs(r) == 0);
  r->state = RegionState::kDead;
  // Slots naming r now hold meaningless counts: let their owners reclaim
  // them. This happens before r is freed, so no non-dead slot ever names a
  // freed region (or a later one allocated at the same address).
  threads_.MarkSlots(r, ThreadCache::kDead);
  dead->Push(r);
}

void Reclaim::RecheckRetired(DeadList* dead) {
  // Retired regions gain no new references (they left the index and every
  // lookup entry naming them is stale), so a zero count is final.
  for (Region* r = retired_; r != nullptr;) {
    Region* next = r->next_dead;
    if (threads_.TotalRefs(r) == 0) {
      UnlinkRetired(r);
      Kill(r, dead);
    }
    r = next;
  }
}

bool Reclaim::RetiredAgree() const {
  for (const Region* r = retired_; r != nullptr; r = r->next_dead) {
    if (r->state != RegionState::kInvalid || !r->on_retired_list) return false;
  }
  return true;
}

void Reclaim::LinkRetired(Region* r) {
  r->on_retired_list = true;
  r->prev_retired = nullptr;
  r->next_dead = retired_;
  if (retired_ != nullptr) retired_->prev_retired = r;
  retired_ = r;
}

void Reclaim::UnlinkRetired(Region* r) {
  if (r->prev_retired != nullptr) r->prev_retired->next_dead = r->next_dead;
  if (r->next_dead != nullptr) r->next_dead->prev_retired = r->prev_retired;
  if (retired_ == r) retired_ = r->next_dead;
  r->prev_retired = r->next_dead = nullptr;
  r->on_retired_list = false;
}

}  // namespace mrcache
