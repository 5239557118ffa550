// deregistration_queue.h: the process's background deregistration thread and
// the bounded queue that feeds it (config key async_dereg).
//
// A registration that leaves a cache (evicted, invalidated and unreferenced,
// flushed, displaced by a merge) is in a Region that is out of the index,
// referenced by nobody and named by no live slot (CacheImpl::KillLocked): no
// get can be handed it again, whatever its deregistration's progress. So the
// thread whose get or put took it out need not deregister it: a cache with
// async_dereg on pushes such Regions here, and one thread per process hands
// them back to their cache (Owner::DeregisterQueued), which does what an
// inline deregistration does (retire callback, deregistration, unwatch,
// quarantine of the Region). Each owner's Regions are taken one at a time
// in the order they were pushed; owners take turns.
//
// Priority: the worker runs SCHED_BATCH at nice 19 (kWorkerNice), so that the
// scheduler does not pick it over an application thread that wants the CPU
// (it gets about 1/68 of a nice-0 thread's share): once it runs, its
// unpinning of a big registration is a single system call the kernel does
// not preempt (a kernel built without full preemption), and a thread that it
// displaced from a CPU waited for the whole of it -- the tail of a get that
// evicts 1 GiB (bench/RESULTS.md). The price is that under
// CPU load the worker may fall behind; whoever must wait for the queue
// therefore does not sleep while a Region it waits for is still waiting: it
// deregisters that Region itself, on its own thread and at its own priority
// (Drain, DrainAll and the fork handler help), and sleeps only for the one
// Region the worker has in flight. A process cannot raise the worker's
// priority again without CAP_SYS_NICE or RLIMIT_NICE, so helping rather than
// boosting.
//
// Worth it for big registrations only: a batch of fewer registered bytes
// than the config key async_dereg_bytes (64 MiB by default) is deregistered
// by its caller (the owner decides, Deregistration::Deregister). The thread's
// deregistration competes with the application's next registration for the
// registrar's lock (io_uring's ring lock; a PD's) and, on a busy machine, for
// a CPU: that costs the application about what it saves while a
// deregistration takes microseconds (mrbench's buffers of 4 KiB to 8 MiB ran
// slower with batches of 1 MiB and more handed over), and far less than it
// saves when one takes milliseconds (a 1 GiB region: 5 to 150 ms here).
// An invalidated registration is such a one from a smaller size: its
// memory is unmapped, so unpinning frees the pages (config key
// async_dereg_invalidated_bytes, 256 KiB). Numbers in bench/RESULTS.md.
//
// Bounded: at most kMaxRegions Regions wait, over all owners. Push refuses a
// batch beyond that and its caller deregisters the batch inline (it does not
// wait): a get or put then pays for its own victims only, as with async_dereg
// off, never for other threads' -- and the registrations the queue keeps
// pinned stay bounded while the thread falls behind.
//
// Waiting: Drain(lane) returns once every Region the lane's owner pushed
// before the call is deregistered; DrainAll() the same for every owner, and
// returns how many it waited for. Both deregister waiting Regions on the
// calling thread (see Priority), so the owner's DeregisterQueued -- and a
// retire callback -- also runs on threads that wait. Never call them with a
// lock the worker may need (a cache's mu_: the owner takes it to
// quarantine). Called on a thread that is deregistering queued Regions (a
// retire callback that calls into mrcache, on the worker or on a waiter
// that helps) they return at once.
//
// Thread lifetime: a lane per owner (Join, Leave); the thread starts at the
// first Push and is stopped and joined at the Leave of the last lane (the
// owner must have drained its lane, or taken it back, before it leaves).
//
// fork(): the queue's prepare handler (installed at the first Join, so it
// runs before fork_guard.h's, which was installed at load time) deregisters
// the waiting Regions itself and waits for those in flight until none is
// left, then holds the queue's lock across the fork. So a child inherits no pending deregistration
// -- the parent's registrations stay the parent's, and a fork-safe registrar's pages (MADV_DONTFORK
// while registered) of a dead region are the child's again -- and no held lock. While the handler
// waits, Push refuses (its caller deregisters inline), so other threads cannot keep the queue from
// emptying: a fork waits at most for what was queued when it began. The child has no worker thread;
// its first Push starts one. The lock is a leaf: nothing waits for another lock while holding it,
// and no thread waits for it while holding a lock of fork_guard.h's list.
#ifndef MRCACHE_DEREGISTRATION_QUEUE_H_
#define MRCACHE_DEREGISTRATION_QUEUE_H_

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "mrcache/core/region.h"
#include "mrcache/internal/mutex.h"

namespace mrcache {

class DeregistrationQueue {
 public:
  // At most this many Regions wait over all owners.
  static constexpr size_t kMaxRegions = 4096;
  // The worker thread's nice value (SCHED_BATCH): the lowest priority of
  // the normal policies.
  static constexpr int kWorkerNice = 19;

  class Owner {
   public:
    // On the worker thread, no lock of the queue held: deregisters `list`
    // (Regions linked through next_dead, as pushed, in order).
    virtual void DeregisterQueued(Region* list) = 0;

   protected:
    ~Owner() = default;
  };
  // One owner's waiting Regions and counts (opaque to owners).
  struct Lane;

  // The process's queue (never destroyed).
  static DeregistrationQueue& Process();

  // A lane for `owner`, which the owner passes to the calls below until it
  // leaves. Allocates; takes the queue's lock.
  Lane* Join(Owner* owner);
  // Removes `lane`, which holds no Region (Drain, or TakeAll in a fork
  // child); the last lane's Leave stops and joins the worker thread.
  void Leave(Lane* lane);
  // Queues `list` (`count` Regions linked through next_dead) for the worker;
  // false (nothing queued) if that would exceed kMaxRegions, a fork is
  // waiting for the queue to empty, or no worker thread can be started.
  bool Push(Lane* lane, Region* list, size_t count);
  // Waits until every Region pushed on `lane` before the call is
  // deregistered, deregistering on this thread those still waiting (the
  // worker's Region in flight is waited for); false if there was nothing to
  // wait for.
  bool Drain(Lane* lane);
  // The same for every lane; adds the registered bytes
  // (Registration::length) deregistered meanwhile to *bytes.
  bool DrainAll(size_t* bytes);
  // The Regions of `lane` not yet handed to its owner, removed from the
  // queue underegistered (a fork child's copy of a parent's cache frees
  // them; its registrar must not be called).
  Region* TakeAll(Lane* lane);
  // What the queue did for one lane.
  struct LaneFigures {
    size_t depth = 0;            // Regions waiting or being deregistered now
    uint64_t background_ns = 0;  // time the worker spent deregistering the lane's Regions
  };
  // `lane`'s figures now (takes the queue's lock: not for a hot path).
  LaneFigures Figures(const Lane* lane);

 private:
  DeregistrationQueue() = default;
  // The worker thread's start: `epoch` is epoch_ when it was created,
  // passed in so that a worker that starts late (a nice-19 thread on a busy
  // machine) does not read an epoch_ a stop has raised meanwhile.
  static void* WorkerMain(void* epoch);
  // Deregisters what is pushed until epoch_ differs from `mine`.
  void Work(uint64_t mine);
  // Starts the worker if none runs; false if it cannot be started.
  bool StartWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next lane with waiting Regions, turn by turn, or nullptr.
  Lane* NextLaneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for done_signal_ to change from `seen`, mu_ dropped meanwhile.
  void WaitDoneLocked(uint32_t seen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the oldest waiting Region of `lane` (which has one) and hands it
  // to the owner on the calling thread, mu_ dropped meanwhile; counts it
  // done and wakes the waiters. The worker's time is counted in the lane's
  // background_ns (`by_worker`), a waiter's is not.
  void DeregisterOneLocked(Lane* lane, bool by_worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A waiter's step (Drain, DrainAll, ForkPrepare): deregisters the oldest
  // waiting Region of `lane` itself, or, with no lane to help (nullptr), sleeps
  // until done_signal_ changes from `seen`.
  void HelpOrWaitLocked(Lane* lane, uint32_t seen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool OnWorkerThread();
  // True on a thread inside an owner's DeregisterQueued (the worker, or a
  // waiter helping it).
  static bool DeregisteringQueued();
  static void ForkPrepare();
  static void ForkParent();
  static void ForkChild();

  Mutex mu_;
  Lane* lanes_ ABSL_GUARDED_BY(mu_) = nullptr;   // linked through Lane::next
  Lane* cursor_ ABSL_GUARDED_BY(mu_) = nullptr;  // the lane served next
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;      // Regions in lanes, not yet handed over
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;    // Regions handed over, not yet done
  // Regions ever pushed, and ever deregistered or taken back, over all lanes.
  uint64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_bytes_ ABSL_GUARDED_BY(mu_) = 0;   // their Registration::length
  bool running_ ABSL_GUARDED_BY(mu_) = false;      // a worker thread exists
  bool sleeping_ ABSL_GUARDED_BY(mu_) = false;     // it waits for work_signal_ (a Push wakes it)
  size_t forks_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // ForkPrepare calls waiting for the queue
  size_t done_waiters_ ABSL_GUARDED_BY(mu_) = 0;   // threads waiting for done_signal_
  // Raised to stop the worker; a worker exits when it differs from the
  // value it started with.
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  pthread_t worker_ ABSL_GUARDED_BY(mu_){};
  // Futex words, raised under mu_: work_signal_ when a Push or a stop has
  // something for the worker, done_signal_ when a batch is done. Futexes
  // rather than condition variables: a fork child inherits no waiter state.
  std::atomic<uint32_t> work_signal_{0};
  std::atomic<uint32_t> done_signal_{0};
  // Set by the first Push (under mu_), never cleared: until then Drain and
  // DrainAll have nothing to wait for and return without the lock, so a
  // process whose batches are all below async_dereg_bytes (deregistered by
  // their callers) pays no lock for the waits a miss short of pin budget makes.
  std::atomic<bool> ever_pushed_{false};
};

}  // namespace mrcache

#endif  // MRCACHE_DEREGISTRATION_QUEUE_H_
