#include "mrcache/core/deregistration_queue.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <mutex>

#include "mrcache/core/dcheck.h"

namespace mrcache {

struct DeregistrationQueue::Lane {
  explicit Lane(Owner* o) : owner(o) {}
  Owner* const owner;
  Lane* next = nullptr;
  // Waiting Regions, oldest first, linked through next_dead.
  Region* head = nullptr;
  Region* tail = nullptr;
  size_t waiting = 0;          // Regions in head..tail
  size_t in_flight = 0;        // Regions the worker is deregistering now
  size_t waiting_bytes = 0;    // their Registration::length, of head..tail
  uint64_t pushed = 0;         // Regions ever pushed
  uint64_t done = 0;           // of those, deregistered or taken back
  uint64_t background_ns = 0;  // the worker's time in the owner's DeregisterQueued
};

namespace {

thread_local bool t_on_worker = false;
// Set while this thread deregisters queued Regions (the worker, or a waiter
// helping it): its Drain and DrainAll (a retire callback calling into
// mrcache) return at once rather than wait for themselves.
thread_local bool t_deregistering_queued = false;
std::once_flag g_atfork_once;

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr,
          0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

DeregistrationQueue& DeregistrationQueue::Process() {
  static DeregistrationQueue* const queue = new DeregistrationQueue;
  return *queue;
}

bool DeregistrationQueue::OnWorkerThread() { return t_on_worker; }

bool DeregistrationQueue::DeregisteringQueued() { return t_deregistering_queued; }

DeregistrationQueue::Lane* DeregistrationQueue::Join(Owner* owner) {
  std::call_once(g_atfork_once, [] { pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild); });
  Lane* lane = new Lane(owner);
  MutexLock<Mutex> lock(&mu_);
  lane->next = lanes_;
  lanes_ = lane;
  return lane;
}

void DeregistrationQueue::Leave(Lane* lane) {
  bool join = false;
  pthread_t worker{};
  {
    MutexLock<Mutex> lock(&mu_);
    for (Lane** p = &lanes_; *p != nullptr; p = &(*p)->next) {
      if (*p == lane) {
        *p = lane->next;
        break;
      }
    }
    if (cursor_ == lane) cursor_ = lane->next;
    if (lanes_ == nullptr && running_) {
      running_ = false;
      ++epoch_;
      worker = worker_;
      join = true;
      work_signal_.fetch_add(1, std::memory_order_release);
    }
  }
  if (join) {
    FutexWakeAll(&work_signal_);
    // A retire callback that destroys the last cache runs on the worker.
    if (OnWorkerThread()) {
      pthread_detach(worker);
    } else {
      pthread_join(worker, nullptr);
    }
  }
  delete lane;
}

bool DeregistrationQueue::Push(Lane* lane, Region* list, size_t count) {
  if (list == nullptr) return true;
  Region* tail = list;
  size_t bytes = tail->reg.length;
  while (tail->next_dead != nullptr) {
    tail = tail->next_dead;
    bytes += tail->reg.length;
  }
  {
    MutexLock<Mutex> lock(&mu_);
    if (forks_waiting_ != 0) return false;
    if (waiting_ + in_flight_ + count > kMaxRegions) return false;
    if (!running_ && !StartWorkerLocked()) return false;
    if (lane->tail != nullptr) {
      lane->tail->next_dead = list;
    } else {
      lane->head = list;
    }
    lane->tail = tail;
    lane->waiting += count;
    lane->waiting_bytes += bytes;
    lane->pushed += count;
    waiting_ += count;
    pushed_ += count;
    ever_pushed_.store(true, std::memory_order_release);
    // A busy worker finds the batch when it looks next: no system call.
    if (!sleeping_) return true;
    sleeping_ = false;
    work_signal_.fetch_add(1, std::memory_order_release);
  }
  FutexWakeAll(&work_signal_);
  return true;
}

// Drain, DrainAll and ForkPrepare help rather than sleep while a Region they
// wait for is still waiting: each lane is first in, first out, so while
// done + in_flight < target the lane's oldest waiting Region was pushed
// before the call. They sleep only for the worker's Region in flight.
bool DeregistrationQueue::Drain(Lane* lane) {
  if (!ever_pushed_.load(std::memory_order_acquire) || DeregisteringQueued()) return false;
  MutexLock<Mutex> lock(&mu_);
  const uint64_t target = lane->pushed;
  bool waited = false;
  for (;;) {
    const uint32_t seen = done_signal_.load(std::memory_order_acquire);
    if (lane->done >= target || !running_) return waited;
    const bool help = lane->waiting > 0 && lane->done + lane->in_flight < target;
    HelpOrWaitLocked(help ? lane : nullptr, seen);
    waited = true;
  }
}

bool DeregistrationQueue::DrainAll(size_t* bytes) {
  if (!ever_pushed_.load(std::memory_order_acquire) || DeregisteringQueued()) return false;
  MutexLock<Mutex> lock(&mu_);
  const uint64_t target = pushed_;
  const uint64_t bytes_before = done_bytes_;
  bool waited = false;
  for (;;) {
    const uint32_t seen = done_signal_.load(std::memory_order_acquire);
    if (done_ >= target || !running_) break;
    HelpOrWaitLocked(done_ + in_flight_ < target ? NextLaneLocked() : nullptr, seen);
    waited = true;
  }
  *bytes += done_bytes_ - bytes_before;
  return waited;
}

Region* DeregistrationQueue::TakeAll(Lane* lane) {
  MutexLock<Mutex> lock(&mu_);
  Region* list = lane->head;
  waiting_ -= lane->waiting;
  done_ += lane->waiting;
  lane->done += lane->waiting;
  lane->waiting = 0;
  lane->waiting_bytes = 0;
  lane->head = lane->tail = nullptr;
  return list;
}

DeregistrationQueue::LaneFigures DeregistrationQueue::Figures(const Lane* lane) {
  MutexLock<Mutex> lock(&mu_);
  LaneFigures figures;
  figures.depth = lane->waiting + lane->in_flight;
  figures.background_ns = lane->background_ns;
  return figures;
}

void DeregistrationQueue::HelpOrWaitLocked(Lane* lane, uint32_t seen) {
  if (lane != nullptr) {
    DeregisterOneLocked(lane, /*by_worker=*/false);
  } else {
    WaitDoneLocked(seen);
  }
}

void DeregistrationQueue::WaitDoneLocked(uint32_t seen) {
  ++done_waiters_;
  mu_.unlock();
  FutexWait(&done_signal_, seen);
  mu_.lock();
  --done_waiters_;
}

bool DeregistrationQueue::StartWorkerLocked() {
  // The worker takes no signal: the application's handlers run on its own
  // threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int err = pthread_create(&worker_, nullptr, &WorkerMain,
                                 reinterpret_cast<void*>(static_cast<uintptr_t>(epoch_)));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (err != 0) return false;
  pthread_setname_np(worker_, "mrc-dereg");
  running_ = true;
  return true;
}

void* DeregistrationQueue::WorkerMain(void* epoch) {
  // A batch thread: woken by a Push, it does not preempt the thread that
  // pushed (which is in the middle of a get or put). At nice 19 it does not
  // take a CPU from the application's threads at their next tick either
  // (the scheduler gives it 1/68 of a nice-0 thread's share): once running,
  // its unpinning of a big registration is one system call that the kernel
  // does not preempt, and a thread it displaced waited for all of it
  // (bench/RESULTS.md, "the eviction tail"). What the worker is slow to do
  // under load, a thread that waits for the queue does itself (Drain).
  // Failing to lower its priority only leaves it at the default.
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWorkerNice);
  Process().Work(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(epoch)));
  return nullptr;
}

DeregistrationQueue::Lane* DeregistrationQueue::NextLaneLocked() {
  if (waiting_ == 0) return nullptr;
  Lane* start = cursor_ != nullptr ? cursor_ : lanes_;
  Lane* lane = start;
  do {
    if (lane->waiting > 0) {
      cursor_ = lane->next;
      return lane;
    }
    lane = lane->next != nullptr ? lane->next : lanes_;
  } while (lane != start);
  return nullptr;
}

// The caller drops and retakes mu_: beyond the analysis.
void DeregistrationQueue::DeregisterOneLocked(Lane* lane,
                                              bool by_worker) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  Region* r = lane->head;
  MRCACHE_DCHECK(r != nullptr);
  lane->head = r->next_dead;
  if (lane->head == nullptr) lane->tail = nullptr;
  r->next_dead = nullptr;
  const size_t bytes = r->reg.length;
  --lane->waiting;
  lane->waiting_bytes -= bytes;
  ++lane->in_flight;
  --waiting_;
  ++in_flight_;
  mu_.unlock();
  const bool nested = t_deregistering_queued;
  t_deregistering_queued = true;
  const auto start = std::chrono::steady_clock::now();
  lane->owner->DeregisterQueued(r);
  const auto spent = std::chrono::steady_clock::now() - start;
  t_deregistering_queued = nested;
  mu_.lock();
  // A waiter's own time is its wait (the owner counts it), not the worker's.
  if (by_worker) {
    lane->background_ns +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count());
  }
  --lane->in_flight;
  ++lane->done;
  --in_flight_;
  ++done_;
  done_bytes_ += bytes;
  done_signal_.fetch_add(1, std::memory_order_release);
  if (done_waiters_ > 0) {
    mu_.unlock();
    FutexWakeAll(&done_signal_);
    mu_.lock();
  }
}

// The worker drops and retakes mu_ in one loop: beyond the analysis.
void DeregistrationQueue::Work(uint64_t mine) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  t_on_worker = true;
  mu_.lock();
  while (epoch_ == mine) {
    Lane* lane = NextLaneLocked();
    if (lane == nullptr) {
      const uint32_t seen = work_signal_.load(std::memory_order_acquire);
      sleeping_ = true;
      mu_.unlock();
      FutexWait(&work_signal_, seen);
      mu_.lock();
      sleeping_ = false;
      continue;
    }
    // One Region at a time: a waiter helping meanwhile (Drain) takes the
    // rest, and waits only for this one.
    DeregisterOneLocked(lane, /*by_worker=*/true);
  }
  mu_.unlock();
}

// The fork handlers lock in one call and unlock in the next: beyond the
// analysis.
void DeregistrationQueue::ForkPrepare() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  DeregistrationQueue& q = Process();
  q.mu_.lock();
  if (DeregisteringQueued()) return;  // a retire callback forks: its Region stays in flight
  ++q.forks_waiting_;                 // no Push until the queue is empty: the wait is bounded
  for (;;) {
    const uint32_t seen = q.done_signal_.load(std::memory_order_acquire);
    if (q.waiting_ + q.in_flight_ == 0 || !q.running_) break;
    q.HelpOrWaitLocked(q.NextLaneLocked(), seen);
  }
  --q.forks_waiting_;
}

void DeregistrationQueue::ForkParent() ABSL_NO_THREAD_SAFETY_ANALYSIS { Process().mu_.unlock(); }

void DeregistrationQueue::ForkChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  DeregistrationQueue& q = Process();
  // Only the forking thread exists here: no worker, and nothing of the
  // parent's is left to deregister (ForkPrepare waited for it), but for a
  // batch in flight when the worker itself forked: the parent's, forgotten.
  q.running_ = false;
  q.sleeping_ = false;
  q.done_waiters_ = 0;
  for (Lane* lane = q.lanes_; lane != nullptr; lane = lane->next) {
    lane->done += lane->in_flight;
    lane->in_flight = 0;
  }
  q.done_ += q.in_flight_;
  q.in_flight_ = 0;
  q.mu_.unlock();
}

}  // namespace mrcache
