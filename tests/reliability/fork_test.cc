// fork_test.cc: fork() while other threads are busy on a cache.
//
// Defined behaviour (README "fork()", mrcache/monitors/fork_guard.h): a child never
// inherits a lock of the cache, the monitors or the registrars held by
// another thread of the parent. In the child, the parent's cache returns
// ECHILD from get (and from put, device write, invalidate and flush), can be
// destroyed without touching the parent's registrations, and a new cache
// with the same monitor works (its device writes land in the child's own
// pages; its monitor sees the child's unmaps).
//
// Every test: a cache (counting registrar over uring or sim) used by two
// threads that mmap, get, device-write, put and munmap in a loop, while the
// main thread forks 10 children (25 for the README's whole sequence). Each
// child runs its step under alarm() and reports by exit status; a hang shows
// as SIGALRM. At teardown the parent stops its threads and destroys its
// cache: registrations == deregistrations.
//
// With async_dereg on (ForkWithQueuedDeregistrationsTest) the busy threads'
// deregistrations wait in the background thread's queue, slowed down: fork()
// waits for them (mrcache/core/deregistration_queue.h), so the child's copy of
// the parent's cache has none queued, and the parent deregisters them all.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "tests/cache/counting_registrar.h"
#include "tests/reliability/process_probes.h"

// Sanitizer limits (the tests say so when they skip):
//  - AddressSanitizer of GCC 12 (libasan.so.8) has no fork handling for its
//    own allocator: a child that allocates can block forever on an allocator
//    lock that a busy thread of the parent held at the fork (seen once in
//    about 1,400 forks). Every child here allocates (ECHILD's message, a new
//    cache), so the suite cannot be reliable under ASan and skips.
//  - ThreadSanitizer does not support starting threads in the child of a
//    multi-threaded fork (die_after_fork; with it off, it aborts on "dup
//    thread with used id"). A new cache in the child with `uffd` or `auto`
//    starts the uffd reader, so those children are skipped under TSan; the
//    live statistics page's refresh thread is off there (stats_shm).
//  - ThreadSanitizer of GCC 12 (libtsan.so.2) takes a spin lock of its own
//    (DenseSlabAlloc, its clock blocks) when memory holding a sync object is
//    freed, and a busy thread of the parent may hold it at the fork: a child
//    that destroys the parent's cache then spins forever (gdb: ~CacheImpl ->
//    operator delete -> MetaMap::FreeRange -> StaticSpinMutex::Lock; 2 or 3
//    hung children in 60 runs of this test with both CPUs loaded). Under TSan
//    the children do not destroy the parent's cache (kTsanFreeInChild);
//    plain builds still do.
constexpr bool kAsan = mrcache::testing::UnderAsan();
constexpr bool kTsan = mrcache::testing::UnderTsan();

namespace mrcache {
namespace {

constexpr const char* kTsanFreeInChild =
    "TSan: freeing the parent's cache in a fork child can spin on a TSan lock a parent thread "
    "held at the fork";

using testing::CountingRegistrar;
using testing::RegistrarCounters;

// The full sequence forks 25 times; each single step (a narrower test) 10.
constexpr int kForks = 25;
constexpr int kForksPerStep = 10;
constexpr int kBusyThreads = 2;
constexpr unsigned kChildAlarmSeconds = 10;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

// Exit statuses of a child: which step failed.
enum ChildExit : int {
  kChildOk = 0,
  kParentsGetNotEchild = 10,
  kNewCacheCreateFailed,
  kNewCacheGetFailed,
  kNewCacheWriteFailed,
  kNewCacheBytesWrong,
  kNewCachePutFailed,
  kNewCacheUnbalanced,
  kMapFailed,
  kUnmapNotReported,
  kParentsPutNotEchild,
  kParentsDeviceWriteNotEchild,
  kParentsInvalidateNotEchild,
  kParentsFlushNotEchild,
  kParentsQueueNotEmpty,
};

std::string DescribeChild(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return sig == SIGALRM
               ? std::string("hung (SIGALRM after ") + std::to_string(kChildAlarmSeconds) + " s)"
               : std::string("killed by signal ") + strsignal(sig);
  }
  if (!WIFEXITED(status)) return "status " + std::to_string(status);
  switch (WEXITSTATUS(status)) {
    case kChildOk:
      return "ok";
    case kParentsGetNotEchild:
      return "the parent's cache did not return ECHILD";
    case kNewCacheCreateFailed:
      return "creating a new cache failed";
    case kNewCacheGetFailed:
      return "get on the new cache failed";
    case kNewCacheWriteFailed:
      return "device write on the new cache failed";
    case kNewCacheBytesWrong:
      return "device-written bytes not seen by the CPU";
    case kNewCachePutFailed:
      return "put on the new cache failed";
    case kNewCacheUnbalanced:
      return "new cache: registrations != deregistrations";
    case kMapFailed:
      return "mmap failed";
    case kParentsPutNotEchild:
      return "put on the parent's cache did not return ECHILD";
    case kParentsDeviceWriteNotEchild:
      return "device write on the parent's cache did not return ECHILD";
    case kParentsInvalidateNotEchild:
      return "invalidate on the parent's cache did not return ECHILD";
    case kParentsFlushNotEchild:
      return "flush on the parent's cache did not return ECHILD";
    case kParentsQueueNotEmpty:
      return "the parent's cache had deregistrations queued in the child";
    case kUnmapNotReported:
      return "the child's munmap did not invalidate the new cache's region";
    default:
      return "exit " + std::to_string(WEXITSTATUS(status));
  }
}

void* MapPages(size_t pages) {
  void* p =
      mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// (monitor, registrar)
using Param = std::tuple<std::string, std::string>;

class ForkTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (kAsan) {
      GTEST_SKIP() << "AddressSanitizer (GCC 12) does not keep its allocator usable in the "
                      "child of a multi-threaded fork (see the top of this file)";
    }
    config_.monitor = std::get<0>(GetParam());
    config_.registrar = std::get<1>(GetParam());
    // The live statistics page is refreshed by a thread of its own, which a
    // child's first new cache starts (stats_publisher.h): not under TSan (see
    // the top of this file). //tests/stats:stats_page_test covers the page
    // across fork.
    config_.stats_shm = !kTsan;
    Tune();
    auto registrar = CreateRegistrar(config_, nullptr);
    ASSERT_TRUE(registrar.ok()) << registrar.status();
    auto made = Cache::Create(
        config_, std::make_unique<CountingRegistrar>(std::move(*registrar), counters_));
    if (!made.ok() && StatusToErrno(made.status()) == ENOTSUP) {
      GTEST_SKIP() << "monitor " << config_.monitor << " unavailable here: " << made.status();
    }
    ASSERT_TRUE(made.ok()) << made.status();
    cache_ = std::move(*made);
    for (int i = 0; i < kBusyThreads; ++i) busy_.emplace_back([this, i] { Busy(i); });
  }

  void TearDown() override {
    stop_.store(true);
    for (std::thread& t : busy_) t.join();
    EXPECT_EQ(busy_errors_.load(), 0)
        << "busy threads' get/write/put failed, first: " << first_busy_error_;
    cache_.reset();
    EXPECT_EQ(counters_->registrations.load(), counters_->deregistrations.load());
  }

  // Changes config_ and counters_ before the cache is made.
  virtual void Tune() {}

  // mmap, get, device-write, put, munmap: in a loop, keeping a few buffers
  // so that both hits and misses happen.
  void Busy(int seed) {
    constexpr int kKeep = 4;
    void* bufs[kKeep] = {};
    size_t lens[kKeep] = {};
    char pattern[64];
    memset(pattern, 'a' + seed, sizeof(pattern));
    for (unsigned round = 0; !stop_.load(std::memory_order_relaxed); ++round) {
      int k = static_cast<int>(round % kKeep);
      if (bufs[k] != nullptr && round % 3 == 0) {
        if (config_.monitor == "none") (void)cache_->Invalidate(bufs[k], lens[k]);
        munmap(bufs[k], lens[k]);
        bufs[k] = nullptr;
      }
      if (bufs[k] == nullptr) {
        lens[k] = (1 + (round + seed) % 16) * kPage;
        bufs[k] = MapPages(lens[k] / kPage);
        if (bufs[k] == nullptr) {
          BusyError(ErrnoStatus(errno, "mmap"));
          break;
        }
      }
      auto r = cache_->Acquire(bufs[k], lens[k], kRw);
      if (!r.ok()) {
        BusyError(r.status());
        break;
      }
      // At the buffer itself: the region may be wider (merged with a
      // neighbour that another thread is unmapping).
      size_t offset = static_cast<char*>(bufs[k]) - static_cast<char*>(GetRegionInfo(*r).addr);
      BusyError(cache_->DeviceWrite(*r, offset, pattern, sizeof(pattern)));
      BusyError(cache_->Put(*r));
      busy_rounds_.fetch_add(1, std::memory_order_relaxed);
    }
    for (int k = 0; k < kKeep; ++k) {
      if (bufs[k] == nullptr) continue;
      if (config_.monitor == "none") (void)cache_->Invalidate(bufs[k], lens[k]);
      munmap(bufs[k], lens[k]);
    }
  }

  // Counts a failed step of a busy thread, keeping the first message.
  void BusyError(const absl::Status& s) {
    if (s.ok()) return;
    if (busy_errors_.fetch_add(1) == 0) first_busy_error_ = s.ToString();
  }

  // Forks `forks` children while the busy threads run; each runs `child`
  // under alarm() and _exits with what it returns. Expects every child to
  // exit 0, naming the failed step otherwise.
  template <typename Fn>
  void ForkChildren(int forks, Fn child) {
    // Let the busy threads get going first.
    while (busy_rounds_.load() < 2 * kBusyThreads) std::this_thread::yield();
    int failed = 0;
    for (int i = 0; i < forks; ++i) {
      uint64_t before = busy_rounds_.load();
      while (busy_rounds_.load() == before) std::this_thread::yield();  // busy between forks
      if (cache_->stats().dereg_queue_depth != 0) ++forks_with_queued_deregistrations_;
      pid_t pid = fork();
      ASSERT_GE(pid, 0) << strerror(errno);
      if (pid == 0) {
        alarm(kChildAlarmSeconds);
        _exit(child());
      }
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == kChildOk)) {
        ++failed;
        ADD_FAILURE() << "child " << i << ": " << DescribeChild(status);
      }
    }
    EXPECT_EQ(failed, 0) << "of " << forks << " children";
  }

  // Put, device write, invalidate and flush of a region the parent got
  // before the fork would reach the parent's registrar: ECHILD, untouched.
  int UseParentsRegion(Region* held, void* addr, size_t len) {
    char byte = 1;
    if (StatusToErrno(cache_->Put(held)) != ECHILD) return kParentsPutNotEchild;
    if (StatusToErrno(cache_->DeviceWrite(held, 0, &byte, 1)) != ECHILD) {
      return kParentsDeviceWriteNotEchild;
    }
    if (StatusToErrno(cache_->Invalidate(addr, len)) != ECHILD) return kParentsInvalidateNotEchild;
    if (StatusToErrno(cache_->Flush()) != ECHILD) return kParentsFlushNotEchild;
    return kChildOk;
  }

  // Under TSan a child must not start threads (see the top of this file);
  // there `auto` includes uffd too (a sanitizer runtime is loaded: monitor.h).
  bool NewCacheStartsAThread() const {
    return config_.monitor.find("uffd") != std::string::npos ||
           config_.monitor.find("auto") != std::string::npos;
  }

  // Child steps (return a ChildExit).
  int GetFromParentsCache() {
    char byte = 0;
    auto r = cache_->Acquire(&byte, 1, kAccessLocalWrite);
    if (r.ok() || StatusToErrno(r.status()) != ECHILD) return kParentsGetNotEchild;
    return kChildOk;
  }

  int UseNewCache() {
    auto counters = std::make_shared<RegistrarCounters>();
    auto registrar = CreateRegistrar(config_, nullptr);
    if (!registrar.ok()) return kNewCacheCreateFailed;
    auto made = Cache::Create(config_,
                              std::make_unique<CountingRegistrar>(std::move(*registrar), counters));
    if (!made.ok()) return kNewCacheCreateFailed;
    std::unique_ptr<Cache> cache = std::move(*made);
    const size_t len = 4 * kPage;
    char* buf = static_cast<char*>(MapPages(4));
    if (buf == nullptr) return kMapFailed;
    std::vector<char> pattern(len);
    for (size_t i = 0; i < len; ++i) pattern[i] = static_cast<char>(i * 7 + 3);
    int rc = kChildOk;
    auto r = cache->Acquire(buf, len, kRw);
    if (!r.ok()) {
      rc = kNewCacheGetFailed;
    } else {
      size_t offset = buf - static_cast<char*>(GetRegionInfo(*r).addr);
      if (!cache->DeviceWrite(*r, offset, pattern.data(), len).ok()) {
        rc = kNewCacheWriteFailed;
      } else if (memcmp(buf, pattern.data(), len) != 0) {
        rc = kNewCacheBytesWrong;
      }
      if (!cache->Put(*r).ok() && rc == kChildOk) rc = kNewCachePutFailed;
    }
    if (config_.monitor == "none") (void)cache->Invalidate(buf, len);
    munmap(buf, len);
    cache.reset();
    if (rc == kChildOk && counters->registrations.load() != counters->deregistrations.load()) {
      rc = kNewCacheUnbalanced;
    }
    return rc;
  }

  // The child's monitor (for uffd: a new reader, its own userfaultfd) reports
  // the child's munmap to the child's new cache.
  int NewCacheSeesUnmap() {
    auto made = Cache::Create(config_);
    if (!made.ok()) return kNewCacheCreateFailed;
    std::unique_ptr<Cache> cache = std::move(*made);
    char* buf = static_cast<char*>(MapPages(2));
    char* other = static_cast<char*>(MapPages(1));
    if (buf == nullptr || other == nullptr) return kMapFailed;
    auto r = cache->Acquire(buf, 2 * kPage, kRw);
    if (!r.ok()) return kNewCacheGetFailed;
    if (!cache->Put(*r).ok()) return kNewCachePutFailed;
    munmap(buf, 2 * kPage);
    // The next get applies what the monitors reported.
    auto o = cache->Acquire(other, kPage, kRw);
    if (!o.ok()) return kNewCacheGetFailed;
    if (!cache->Put(*o).ok()) return kNewCachePutFailed;
    int rc = cache->stats().invalidations >= 1 ? kChildOk : kUnmapNotReported;
    munmap(other, kPage);
    return rc;
  }

  // The parent's cache in the child has nothing queued for the background
  // thread: fork() waited for the parent's queued deregistrations.
  int ParentsQueueIsEmpty() {
    return cache_->stats().dereg_queue_depth == 0 ? kChildOk : kParentsQueueNotEmpty;
  }

  // The parent's cache is destroyed in the child; the parent keeps using it.
  int DestroyParentsCache() {
    cache_.reset();
    return kChildOk;
  }

  Config config_;
  std::shared_ptr<RegistrarCounters> counters_ = std::make_shared<RegistrarCounters>();
  std::unique_ptr<Cache> cache_;
  std::vector<std::thread> busy_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> busy_rounds_{0};
  std::atomic<int> busy_errors_{0};
  std::string first_busy_error_;               // written once, by the first failing thread
  int forks_with_queued_deregistrations_ = 0;  // the queue was not empty just before
};

TEST_P(ForkTest, ChildGetsEchildFromTheParentsCache) {
  ForkChildren(kForksPerStep, [this] { return GetFromParentsCache(); });
}

TEST_P(ForkTest, ChildGetsEchildFromEveryCallThatWouldReachTheParentsRegistrar) {
  const size_t len = 2 * kPage;
  void* buf = MapPages(2);
  ASSERT_NE(buf, nullptr);
  auto held = cache_->Acquire(buf, len, kRw);
  ASSERT_TRUE(held.ok()) << held.status();
  ForkChildren(kForksPerStep, [&] { return UseParentsRegion(*held, buf, len); });
  EXPECT_TRUE(cache_->Put(*held).ok()) << "the parent's reference is intact";
  if (config_.monitor == "none") {
    EXPECT_TRUE(cache_->Invalidate(buf, len).ok());
  }
  munmap(buf, len);
}

TEST_P(ForkTest, ChildCreatesAWorkingCacheWithTheSameMonitor) {
  if (kTsan && NewCacheStartsAThread()) GTEST_SKIP() << "TSan: no threads in a fork child";
  ForkChildren(kForksPerStep, [this] { return UseNewCache(); });
}

TEST_P(ForkTest, ChildsNewCacheIsToldOfTheChildsUnmaps) {
  if (config_.monitor == "none") GTEST_SKIP() << "monitor none reports nothing";
  if (kTsan && NewCacheStartsAThread()) GTEST_SKIP() << "TSan: no threads in a fork child";
  ForkChildren(kForksPerStep, [this] { return NewCacheSeesUnmap(); });
}

TEST_P(ForkTest, ChildDestroysTheParentsCache) {
  if (kTsan) GTEST_SKIP() << kTsanFreeInChild;
  ForkChildren(kForksPerStep, [this] { return DestroyParentsCache(); });
}

// The sequence the README recommends, in one child.
TEST_P(ForkTest, ChildFollowsTheReadmeSequence) {
  if (kTsan && NewCacheStartsAThread()) GTEST_SKIP() << "TSan: no threads in a fork child";
  ForkChildren(kForks, [this] {
    int rc = GetFromParentsCache();
    if (rc == kChildOk) rc = UseNewCache();
    if (rc == kChildOk && !kTsan) rc = DestroyParentsCache();  // see kTsanFreeInChild
    return rc;
  });
}

// The same busy threads with every deregistration handed to the background
// thread (async_dereg on, async_dereg_bytes 0, mrcache/core/deregistration_queue.h)
// and slowed down, so that most forks find deregistrations queued.
class ForkWithQueuedDeregistrationsTest : public ForkTest {
 protected:
  void Tune() override {
    config_.async_dereg = AsyncDereg::kOn;
    config_.async_dereg_bytes = 0;
    config_.max_regions = 2;  // nearly every miss evicts
    counters_->deregister_delay_us = 100;
  }
};

// fork() waits for the queued deregistrations, so the child sees the
// parent's cache with nothing queued (and ECHILD from it), its own new cache
// works, and the parent deregisters everything it registered (TearDown).
TEST_P(ForkWithQueuedDeregistrationsTest, ChildInheritsNoQueuedDeregistration) {
  ForkChildren(kForksPerStep, [this] {
    int rc = ParentsQueueIsEmpty();
    if (rc == kChildOk) rc = GetFromParentsCache();
    // A new cache with async_dereg on starts its background thread in the
    // child (not under TSan: see the top of this file).
    if (rc == kChildOk && !kTsan) rc = UseNewCache();
    if (rc == kChildOk && !kTsan) rc = DestroyParentsCache();  // see kTsanFreeInChild
    return rc;
  });
  EXPECT_GT(forks_with_queued_deregistrations_, 0)
      << "no fork found a deregistration queued: the test did not exercise the queue";
}

INSTANTIATE_TEST_SUITE_P(MonitorsAndRegistrars, ForkWithQueuedDeregistrationsTest,
                         ::testing::Combine(::testing::Values("patch", "none"),
                                            ::testing::Values("uring", "sim")),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

INSTANTIATE_TEST_SUITE_P(MonitorsAndRegistrars, ForkTest,
                         ::testing::Combine(::testing::Values("auto", "patch", "symbols",
                                                              "symbols+uffd", "none"),
                                            ::testing::Values("uring", "sim")),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           std::string monitor = std::get<0>(info.param);
                           const size_t plus = monitor.find('+');
                           if (plus != std::string::npos) monitor.replace(plus, 1, "_and_");
                           return monitor + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace mrcache
