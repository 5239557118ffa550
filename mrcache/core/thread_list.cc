// thread_list.cc: the folding and summing parts of ThreadList.
#include "mrcache/core/thread_list.h"

namespace mrcache {

ThreadList::~ThreadList() {
  for (ThreadCache* tc = head_; tc != nullptr;) {
    ThreadCache* next = tc->next;
    ThreadCache::Unref(tc);
    tc = next;
  }
}

void ThreadList::FoldOrphans(uint64_t region_frees) {
  // Before the walk: an orphan that raises the epoch after this load is
  // folded by the next call.
  folded_orphan_epoch_ = OrphanEpoch();
  for (ThreadCache** p = &head_; *p != nullptr;) {
    ThreadCache* tc = *p;
    if (!tc->orphaned.load(std::memory_order_acquire)) {
      p = &tc->next;
      continue;
    }
    for (size_t i = 0; i <= tc->mask; ++i) {
      const ThreadCache::Line& slot = tc->lines[i];
      Region* r = slot.ref_region;
      if (r == nullptr || slot.ref_state.load(std::memory_order_relaxed) == ThreadCache::kDead) {
        continue;
      }
      r->locked_refs += slot.ref_count.load(std::memory_order_relaxed);
      r->RaiseLastUse(slot.ref_last_use.load(std::memory_order_relaxed));
    }
    tc->FoldDisplaced(region_frees);
    folded_hits_ += tc->hits.load(std::memory_order_relaxed);
    folded_read_locked_hits_ += tc->read_locked_hits.load(std::memory_order_relaxed);
    *p = tc->next;
    ThreadCache::Unref(tc);
  }
}

uint64_t ThreadList::Hits() const {
  uint64_t sum = folded_hits_;
  for (const ThreadCache* tc = head_; tc != nullptr; tc = tc->next) {
    sum += tc->hits.load(std::memory_order_relaxed);
  }
  return sum;
}

uint64_t ThreadList::ReadLockedHits() const {
  uint64_t sum = folded_read_locked_hits_;
  for (const ThreadCache* tc = head_; tc != nullptr; tc = tc->next) {
    sum += tc->read_locked_hits.load(std::memory_order_relaxed);
  }
  return sum;
}

}  // namespace mrcache
