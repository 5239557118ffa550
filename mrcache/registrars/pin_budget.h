// pin_budget.h: how many bytes the caches of this process may pin.
//
// Pinning (ibv_reg_mr per process, io_uring buffer registration per user)
// counts against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK in the
// initial user namespace. The rule (README "Pinned-memory budget"):
//
//   limit  = the soft RLIMIT_MEMLOCK, or none if it is unlimited or the
//            process is exempt (CAP_IPC_LOCK);
//   budget = limit - headroom, headroom = max(limit / 8, 64 KiB), capped at
//            limit / 2: the application's own pins (mlock, its own MRs, the
//            io_uring rings of older kernels) keep that much;
//   a cache's budget is the process budget, or max_bytes if that is smaller.
//
// One PinBudget per process (PinBudget::Process()) is shared by every cache:
// the bytes that all of them pin together stay within it. When a registrar
// refuses (ENOMEM/EAGAIN) although the pins plus the request fit the budget,
// something else pins too: the budget is lowered to what was pinned then
// (Lower) and recovers gradually: each successful registration raises it by
// 1/16 of its own size (Accepted), so that a refusal costs at most one failed
// call per 16 registrations while the other pins stay; never above the
// computed budget. What refusals taught lasts while any cache is a member
// and ends when the last one leaves: the next cache starts from the computed
// budget (one refusal teaches it again if the other pins are still there).
// Without a computed budget (no limit applies) refusals teach nothing: they
// are device limits, not a pinned-bytes ceiling.
//
// Members: each cache joins (Join) and leaves (Leave, which waits for a
// reclaim of that cache under way); a cache short of room asks the others to
// give back unused regions (ReclaimOthers). The registry lock is held only
// to walk or edit the member list, never across a reclaim, a registrar call,
// or another lock; a fork child starts with it free and no reclaim under way.
// Memory hooks never use this class.
#ifndef MRCACHE_PIN_BUDGET_H_
#define MRCACHE_PIN_BUDGET_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "mrcache/internal/mutex.h"

namespace mrcache {

// True unless the calling thread has CAP_IPC_LOCK in its effective set and
// the process is in the initial user namespace: then pinned pages count
// against RLIMIT_MEMLOCK (the kernel's rule for io_uring and for verbs).
bool PinsCountAgainstMemlock();

// The budget rule above for a soft limit of `limit` bytes (RLIM_INFINITY =
// unlimited) and whether pins count against it; 0 means no budget.
size_t BudgetForLimit(uint64_t limit, bool counted);

// The RLIMIT_MEMLOCK soft limit that applies to this process's pins, or 0 if
// none does (unlimited, or exempt by CAP_IPC_LOCK).
size_t MemlockLimitThatApplies();

class PinBudget {
 public:
  // A cache that can give back unused registrations.
  class Member {
   public:
    // Deregisters unused regions (in the order the cache evicts for bytes)
    // until about `bytes` are released or none is left; returns the bytes
    // released. Called without any lock of the caller held.
    virtual size_t ReclaimUnused(size_t bytes) = 0;

   protected:
    ~Member() = default;
  };

  // The process's budget.
  static PinBudget& Process();

  // Recomputes the limit from RLIMIT_MEMLOCK and the calling thread's
  // capabilities (done at each cache creation). A changed limit also resets
  // what refusals taught.
  void Refresh();

  // The RLIMIT_MEMLOCK soft limit that applies (0 = none), as last refreshed.
  size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // The computed budget (0 = none), and the effective one: the computed one,
  // lowered by refusals (0 = no limit known).
  size_t computed() const { return computed_.load(std::memory_order_relaxed); }
  size_t budget() const;
  // Bytes pinned by every cache of the process.
  size_t pinned() const { return pinned_.load(std::memory_order_relaxed); }

  void AddPinned(size_t bytes) { pinned_.fetch_add(bytes, std::memory_order_relaxed); }
  void SubPinned(size_t bytes) { pinned_.fetch_sub(bytes, std::memory_order_relaxed); }

  // The registrar refused a registration while `pinned_then` bytes were
  // pinned: lowers the budget to that, if it was above. Nothing without a
  // computed budget.
  void Lower(size_t pinned_then);
  // The registrar refused a request of `need` bytes for want of memory:
  // lowers the budget to the bytes pinned now if the request fitted beside
  // them (something else pins too), and returns the bytes to free for the
  // request to fit under the budget (under the limit itself, for a request
  // larger than the budget); *hopeless if it exceeds the limit itself, which
  // nothing evicted can help. Without a limit: `need`.
  size_t RoomAfterRefusal(size_t need, bool* hopeless);
  // A registration of `bytes` succeeded: a lowered budget recovers by
  // bytes / 16 (at least one byte).
  void Accepted(size_t bytes);

  void Join(Member* m);
  // Removes m; returns once no reclaim of m is under way. The last member's
  // leaving forgets what refusals taught (Lower).
  void Leave(Member* m);
  // Asks every member but `self` to release unused regions until `bytes` are
  // released in all; returns the bytes released.
  size_t ReclaimOthers(Member* self, size_t bytes);

  // fork child: the registry lock is free, no reclaim is under way, and
  // nothing is pinned yet.
  void ResetInChild();

 private:
  struct Node {
    Member* member;
    int busy;  // reclaims of it under way (guarded by the budget's mu_)
    Node* next;
  };
  PinBudget() = default;
  static void LockForFork();
  static void UnlockAfterFork();

  std::atomic<size_t> limit_{0};
  std::atomic<size_t> computed_{0};
  std::atomic<size_t> learned_{SIZE_MAX};  // SIZE_MAX: nothing learned
  std::atomic<size_t> pinned_{0};
  Mutex mu_;
  Node* members_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace mrcache

#endif  // MRCACHE_PIN_BUDGET_H_
