// page_refs.h: reference counts per page over address ranges, with an action
// when pages gain their first reference and when they lose their last.
//
// softverbs uses it where the kernel or libibverbs keep per-page state that
// several registrations share: MADV_DONTFORK/MADV_DOFORK for fork protection
// (as libibverbs' range tree does) and mlock/munlock for read-only pins.
//
// Invariants (under mu_): runs_ maps the first byte of each run of pages
// with a nonzero count to {end, count}; runs are page-aligned, disjoint and
// never empty; pages outside every run have count 0.
#ifndef SOFTVERBS_PAGE_REFS_H_
#define SOFTVERBS_PAGE_REFS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace softverbs {

class PageRefs {
 public:
  // Applied to [start, start+len), a maximal run of pages within the range
  // asked whose count goes 0 -> 1 (first) or 1 -> 0 (last). 0 or an errno.
  using Action = std::function<int(uintptr_t start, size_t len)>;

  PageRefs(Action first, Action last) : first_(std::move(first)), last_(std::move(last)) {}

  // Adds a reference to every page that [addr, addr+len) touches. If `first`
  // fails on a run, the runs it already did are undone with `last`, no count
  // changes, and that errno is returned; else 0. len 0 does nothing.
  int Acquire(uintptr_t addr, size_t len);
  // Drops a reference from every page that [addr, addr+len) touches (pages
  // without one are left alone) and applies `last` to the runs whose count
  // reaches 0. Returns 0 or the first errno of `last` (counts drop anyway).
  int Release(uintptr_t addr, size_t len);

  // fork(): held across it so the child never inherits mu_ locked.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }

 private:
  struct Run {
    uintptr_t end;
    uint64_t count;
  };
  // Splits the run containing `at` (strictly inside) in two. Caller holds mu_.
  void SplitLocked(uintptr_t at);
  // Merges runs of equal count that touch, around [start, end). Caller holds mu_.
  void MergeLocked(uintptr_t start, uintptr_t end);

  std::mutex mu_;
  std::map<uintptr_t, Run> runs_;
  const Action first_;
  const Action last_;
};

}  // namespace softverbs

#endif  // SOFTVERBS_PAGE_REFS_H_
