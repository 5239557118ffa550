// pin_budget.cc: see pin_budget.h for the rule and the locking.
#include "mrcache/registrars/pin_budget.h"

#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

namespace mrcache {
namespace {

constexpr size_t kMinHeadroom = size_t{64} << 10;
// A lowered budget recovers by 1/kRecoveryDivisor of each registration.
constexpr size_t kRecoveryDivisor = 16;

bool HasIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1;
}

// Capabilities held in a child user namespace do not exempt from the limit.
bool InInitialUserNamespace() {
  std::FILE* f = std::fopen("/proc/self/uid_map", "re");
  if (f == nullptr) return true;  // no user namespaces in this kernel
  unsigned long inside = 1, outside = 1, count = 0;
  int fields = std::fscanf(f, "%lu %lu %lu", &inside, &outside, &count);
  std::fclose(f);
  return fields == 3 && inside == 0 && outside == 0 && count == 4294967295ul;
}

}  // namespace

bool PinsCountAgainstMemlock() { return !HasIpcLock() || !InInitialUserNamespace(); }

size_t BudgetForLimit(uint64_t limit, bool counted) {
  if (!counted || limit == RLIM_INFINITY || limit >= SIZE_MAX) return 0;
  size_t headroom = static_cast<size_t>(limit / 8);
  if (headroom < kMinHeadroom) headroom = kMinHeadroom;
  if (headroom > limit / 2) headroom = static_cast<size_t>(limit / 2);
  const size_t budget = static_cast<size_t>(limit) - headroom;
  return budget == 0 ? 1 : budget;  // a zero limit still means "limited"
}

size_t MemlockLimitThatApplies() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 0;
  if (lim.rlim_cur == RLIM_INFINITY || !PinsCountAgainstMemlock()) return 0;
  return static_cast<size_t>(lim.rlim_cur);
}

PinBudget& PinBudget::Process() {
  static PinBudget* const budget = [] {
    auto* b = new PinBudget;  // never destroyed: caches may outlive static destructors
    pthread_atfork(&PinBudget::LockForFork, &PinBudget::UnlockAfterFork,
                   [] { Process().ResetInChild(); });
    return b;
  }();
  return *budget;
}

void PinBudget::Refresh() {
  rlimit lim{};
  const bool known = getrlimit(RLIMIT_MEMLOCK, &lim) == 0;
  const bool counted = PinsCountAgainstMemlock();
  const size_t limit =
      known && counted && lim.rlim_cur != RLIM_INFINITY ? static_cast<size_t>(lim.rlim_cur) : 0;
  const size_t computed = known ? BudgetForLimit(lim.rlim_cur, counted) : 0;
  limit_.store(limit, std::memory_order_relaxed);
  if (computed_.exchange(computed, std::memory_order_relaxed) != computed) {
    learned_.store(SIZE_MAX, std::memory_order_relaxed);
  }
}

size_t PinBudget::budget() const {
  const size_t computed = computed_.load(std::memory_order_relaxed);
  const size_t learned = learned_.load(std::memory_order_relaxed);
  if (learned == SIZE_MAX || computed == 0) return computed;
  const size_t b = learned < computed ? learned : computed;
  return b == 0 ? 1 : b;
}

void PinBudget::Lower(size_t pinned_then) {
  if (computed_.load(std::memory_order_relaxed) == 0) return;
  size_t cur = learned_.load(std::memory_order_relaxed);
  while (pinned_then < cur &&
         !learned_.compare_exchange_weak(cur, pinned_then, std::memory_order_relaxed)) {
  }
}

size_t PinBudget::RoomAfterRefusal(size_t need, bool* hopeless) {
  *hopeless = false;
  const size_t lim = limit();
  if (lim == 0) return need;
  const size_t pinned_then = pinned();
  if (pinned_then + need <= budget()) Lower(pinned_then);
  *hopeless = need > lim;
  const size_t ceiling = need > budget() ? lim : budget();
  return pinned_then + need > ceiling ? pinned_then + need - ceiling : need;
}

void PinBudget::Accepted(size_t bytes) {
  size_t cur = learned_.load(std::memory_order_relaxed);
  if (cur == SIZE_MAX) return;  // the common case: nothing learned
  const size_t computed = computed_.load(std::memory_order_relaxed);
  const size_t step = bytes / kRecoveryDivisor > 0 ? bytes / kRecoveryDivisor : 1;
  size_t next;
  do {
    if (cur == SIZE_MAX) return;
    next = cur + step;
    if (computed == 0 || next >= computed) next = SIZE_MAX;  // fully recovered
  } while (!learned_.compare_exchange_weak(cur, next, std::memory_order_relaxed));
}

// The fork handlers lock in one call and unlock in the next: beyond the
// analysis.
void PinBudget::LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Process().mu_.lock(); }
void PinBudget::UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { Process().mu_.unlock(); }

void PinBudget::Join(Member* m) {
  auto* node = new Node{m, 0, nullptr};
  MutexLock lock(&mu_);
  node->next = members_;
  members_ = node;
}

void PinBudget::Leave(Member* m) {
  MutexLock lock(&mu_);
  for (Node** p = &members_; *p != nullptr; p = &(*p)->next) {
    if ((*p)->member != m) continue;
    Node* node = *p;
    while (node->busy > 0) {  // a reclaim of m is under way in another thread
      lock.Unlock();
      sched_yield();
      lock.Lock();
    }
    // The list may have changed while unlocked: find the node again.
    for (Node** q = &members_; *q != nullptr; q = &(*q)->next) {
      if (*q == node) {
        *q = node->next;
        break;
      }
    }
    // The last cache is gone: what refusals taught ends with it.
    if (members_ == nullptr) learned_.store(SIZE_MAX, std::memory_order_relaxed);
    lock.Unlock();
    delete node;
    return;
  }
}

size_t PinBudget::ReclaimOthers(Member* self, size_t bytes) {
  size_t released = 0;
  MutexLock lock(&mu_);
  for (Node* node = members_; node != nullptr && released < bytes; node = node->next) {
    if (node->member == self) continue;
    ++node->busy;  // keeps node (and its member) alive while unlocked
    lock.Unlock();
    released += node->member->ReclaimUnused(bytes - released);
    lock.Lock();
    --node->busy;
  }
  return released;
}

void PinBudget::ResetInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The forking thread took mu_ in the prepare handler; the threads that
  // were reclaiming do not exist here. The parent's pins are not the
  // child's (its caches never deregister here, fork_guard.h): start at 0.
  for (Node* node = members_; node != nullptr; node = node->next) node->busy = 0;
  pinned_.store(0, std::memory_order_relaxed);
  mu_.unlock();
}

}  // namespace mrcache
