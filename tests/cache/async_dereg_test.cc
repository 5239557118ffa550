// async_dereg_test.cc: deregistration off the critical path (config key
// async_dereg, mrcache/core/deregistration_queue.h).
//
// The registrar is sim (free) behind a GatedRegistrar that records the thread
// of every deregistration and can hold the background thread's
// deregistrations at a gate, so that a test sees what a get or put does while
// that thread is busy. The pin budget test runs uring in an unprivileged
// child (RLIMIT_MEMLOCK 8 MiB). Every test ends with registrations ==
// deregistrations.
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/statusor.h"

#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/core/deregistration_queue.h"
#include "mrcache/errno_status.h"
#include "mrcache/forwarding_registrar.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/cache/queued_deregistrations.h"
#include "tests/registrars/low_memlock.h"
#include "tests/reliability/process_probes.h"

namespace mrcache {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kRW = kAccessLocalWrite;

// What the registrar saw, shared with the test.
struct GateState {
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;  // deregistrations off the caller's thread wait while set
  int waiting = 0;      // deregistrations waiting at the gate now
  std::set<uint64_t> live;
  std::atomic<int> registrations{0}, deregistrations{0};
  std::atomic<int> deregistrations_on_caller{0};  // on the thread that made the cache
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> dereg_delay_us{0};
  std::atomic<int> background_delay_us{0};  // the same, off the caller's thread only

  void Close() {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    closed = false;
    cv.notify_all();
  }
  // Waits until `n` deregistrations wait at the gate; false after 10 s.
  bool WaitForWaiting(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return waiting >= n; });
  }
  bool Live(uint64_t handle) {
    std::lock_guard<std::mutex> lock(mu);
    return live.count(handle) != 0;
  }
};

class GatedRegistrar : public ForwardingRegistrar {
 public:
  GatedRegistrar(std::unique_ptr<Registrar> inner, std::shared_ptr<GateState> state)
      : ForwardingRegistrar(std::move(inner)), state_(std::move(state)) {}

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    absl::StatusOr<Registration> reg = inner().Register(addr, length, access);
    if (reg.ok()) {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->live.insert(reg->handle);
      state_->registrations.fetch_add(1);
    }
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    if (std::this_thread::get_id() == state_->caller) {
      state_->deregistrations_on_caller++;
    } else {
      std::unique_lock<std::mutex> lock(state_->mu);
      ++state_->waiting;
      state_->cv.notify_all();
      state_->cv.wait(lock, [this] { return !state_->closed; });
      --state_->waiting;
    }
    if (int us = state_->dereg_delay_us.load()) usleep(static_cast<useconds_t>(us));
    if (std::this_thread::get_id() != state_->caller) {
      if (int us = state_->background_delay_us.load()) usleep(static_cast<useconds_t>(us));
    }
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->live.erase(reg.handle);
      state_->deregistrations.fetch_add(1);
    }
    return inner().Deregister(reg);
  }

 private:
  std::shared_ptr<GateState> state_;
};

class AsyncDeregTest : public ::testing::Test {
 protected:
  void SetUp() override {
    len_ = 64 * kPage;
    buf_ = static_cast<char*>(
        mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
    config_.monitor = "none";
    config_.max_merge_bytes = 0;
    config_.stats_shm = false;
    config_.async_dereg = AsyncDereg::kOn;
    config_.async_dereg_bytes = 0;  // every batch, however small, to the background thread
  }

  void TearDown() override {
    state_->Open();
    cache_.reset();
    EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load())
        << "registrations and deregistrations must match at teardown";
    munmap(buf_, len_);
  }

  Cache& cache() {
    if (!cache_) {
      auto c = Cache::Create(config_,
                             std::make_unique<GatedRegistrar>(MakeSimRegistrar(config_), state_));
      EXPECT_TRUE(c.ok()) << c.status();
      cache_ = std::move(*c);
    }
    return *cache_;
  }

  // A get and put of page `page`; the handle of the region that served it.
  uint64_t Use(size_t page) {
    auto r = cache().Acquire(buf_ + page * kPage, kPage, kRW);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return 0;
    const uint64_t handle = GetRegionInfo(*r).handle;
    EXPECT_TRUE(cache().Put(*r).ok());
    return handle;
  }

  // The cache watches memory with the default monitor, so that Unmap below
  // invalidates the regions over the pages, as an application's munmap does.
  // Before the first cache().
  void WatchMemory() { config_.monitor = Config().monitor; }

  // Unmaps pages [page, page + pages) of buf_ (TearDown unmaps the rest):
  // the monitor reports it, and the next get that misses takes the regions
  // over them out of the index, their memory gone.
  void Unmap(size_t page, size_t pages = 1) {
    ASSERT_EQ(munmap(buf_ + page * kPage, pages * kPage), 0);
  }

  // Maps fresh pages where Unmap took them away.
  void Remap(size_t page, size_t pages = 1) {
    void* p = mmap(buf_ + page * kPage, pages * kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ASSERT_EQ(p, static_cast<void*>(buf_ + page * kPage));
  }

  // With the gate closed: page 0's region in flight at the gate (as a
  // background thread starved of CPU would hold it), pages 2's and 4's
  // waiting behind it; page 6's region is cached.
  void QueueTwoBehindOneHeldAtTheGate() {
    config_.max_regions = 1;
    state_->Close();
    Use(0);
    Use(2);  // page 0's region: in flight, at the gate
    ASSERT_TRUE(state_->WaitForWaiting(1));
    Use(4);  // page 2's region: waiting
    Use(6);  // page 4's region: waiting
    ASSERT_EQ(cache().stats().dereg_queue_depth, 3u);
  }

  // A thread that opens the gate once the test's thread has made `n`
  // deregistrations, or after 10 s whatever happened, so that a test cannot
  // hang; *made says which.
  std::thread OpenTheGateOnceTheCallerDeregistered(int n, std::atomic<bool>* made) {
    return std::thread([this, n, made] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (state_->deregistrations_on_caller.load() < n &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      *made = state_->deregistrations_on_caller.load() >= n;
      state_->Open();
    });
  }

  Config config_;
  std::shared_ptr<GateState> state_ = std::make_shared<GateState>();
  std::unique_ptr<Cache> cache_;
  char* buf_ = nullptr;
  size_t len_ = 0;
};

TEST_F(AsyncDeregTest, EvictionDeregistersOnTheBackgroundThread) {
  config_.max_regions = 1;
  Use(0);
  Use(2);  // evicts page 0's region
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_EQ(state_->deregistrations.load(), 1);
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 0);
}

TEST_F(AsyncDeregTest, AGetThatEvictsDoesNotWaitForTheDeregistration) {
  config_.max_regions = 1;
  const uint64_t first = Use(0);
  state_->Close();
  Use(2);  // returns although the eviction's deregistration is held at the gate
  ASSERT_TRUE(state_->WaitForWaiting(1));
  EXPECT_TRUE(state_->Live(first));
  EXPECT_EQ(cache().stats().dereg_queue_depth, 1u);
  state_->Open();
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_FALSE(state_->Live(first));
  EXPECT_EQ(cache().stats().dereg_queue_depth, 0u);
}

TEST_F(AsyncDeregTest, AnEvictedRegionWaitingForDeregistrationIsNeverHandedOutAgain) {
  config_.max_regions = 1;
  const uint64_t first = Use(0);
  state_->Close();
  Use(2);
  ASSERT_TRUE(state_->WaitForWaiting(1));
  const uint64_t again = Use(0);
  EXPECT_NE(again, first) << "a get of the evicted range registers it anew";
  EXPECT_TRUE(state_->Live(first)) << "while the old registration still waits";
}

TEST_F(AsyncDeregTest, AnUnmappedRegionWaitingForDeregistrationIsNeverHandedOutAgain) {
  WatchMemory();
  const uint64_t first = Use(0);
  state_->Close();
  Unmap(0);
  Use(2);  // takes page 0's region out; its deregistration waits at the gate
  ASSERT_TRUE(state_->WaitForWaiting(1));
  Remap(0);
  const uint64_t again = Use(0);
  EXPECT_NE(again, first) << "the new pages are registered anew";
  EXPECT_TRUE(state_->Live(first)) << "while the old registration still waits";
}

TEST_F(AsyncDeregTest, AHeldUnmappedRegionIsQueuedAtItsLastPutNotBefore) {
  WatchMemory();
  auto r = cache().Acquire(buf_, kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t handle = GetRegionInfo(*r).handle;
  Unmap(0);
  Use(2);  // takes page 0's region out of the index
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_TRUE(state_->Live(handle)) << "a held region keeps its registration";
  ASSERT_TRUE(cache().Put(*r).ok());
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_FALSE(state_->Live(handle));
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 0);
}

TEST_F(AsyncDeregTest, MrcInvalidateDeregistersAnUnusedRegionBeforeItReturns) {
  // async_dereg_bytes 0: any other batch would be handed over.
  const uint64_t handle = Use(0);
  state_->Close();  // a deregistration off this thread would wait here
  ASSERT_TRUE(cache().Invalidate(buf_, kPage).ok());
  EXPECT_FALSE(state_->Live(handle)) << "a peer's key to that memory is dead on return";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
  EXPECT_EQ(cache().stats().dereg_queue_depth, 0u);
  const uint64_t again = Use(0);
  EXPECT_NE(again, handle);
}

TEST_F(AsyncDeregTest, AHeldRegionMrcInvalidateTookOutIsDeregisteredByItsLastPut) {
  auto r = cache().Acquire(buf_, kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t handle = GetRegionInfo(*r).handle;
  state_->Close();
  ASSERT_TRUE(cache().Invalidate(buf_, kPage).ok());
  EXPECT_TRUE(state_->Live(handle)) << "a held region keeps its registration";
  ASSERT_TRUE(cache().Put(*r).ok());
  EXPECT_FALSE(state_->Live(handle)) << "deregistered before the last put returned";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, MrcInvalidateDeregistersItsRegionsBeforeItReturnsAboveEveryThreshold) {
  config_.async_dereg_bytes = kPage;
  config_.async_dereg_invalidated_bytes = kPage;
  auto r = cache().Acquire(buf_, 4 * kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t handle = GetRegionInfo(*r).handle;
  ASSERT_TRUE(cache().Put(*r).ok());
  state_->Close();
  ASSERT_TRUE(cache().Invalidate(buf_, 4 * kPage).ok());
  EXPECT_FALSE(state_->Live(handle));
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, FlushReturnsWithEveryUnusedRegistrationDeregistered) {
  config_.max_regions = 2;
  state_->dereg_delay_us = 20000;
  for (size_t page = 0; page < 16; page += 2) Use(page);  // six evictions queued
  ASSERT_TRUE(cache().Flush().ok());
  EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load());
  EXPECT_EQ(cache().stats().dereg_queue_depth, 0u);
  EXPECT_GT(cache().stats().dereg_wait_ns, 0u) << "flush waited for the queue";
}

TEST_F(AsyncDeregTest, TheBackgroundThreadsDeregistrationTimeIsCountedNotTheCallers) {
  config_.max_regions = 1;
  state_->dereg_delay_us = 20000;
  Use(0);
  EXPECT_EQ(cache().stats().background_dereg_ns, 0u) << "nothing was handed over yet";
  Use(2);  // evicts page 0's region: its 20 ms deregistration runs on the background thread
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 0);
  EXPECT_GE(cache().stats().background_dereg_ns, 20'000'000u);
  EXPECT_EQ(cache().stats().dereg_wait_ns, 0u) << "nobody waited for the queue";
}

TEST_F(AsyncDeregTest, DestroyReturnsWithEveryRegistrationDeregistered) {
  config_.max_regions = 2;
  state_->dereg_delay_us = 20000;
  for (size_t page = 0; page < 16; page += 2) Use(page);
  cache_.reset();
  EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load());
  std::lock_guard<std::mutex> lock(state_->mu);
  EXPECT_TRUE(state_->live.empty());
}

TEST_F(AsyncDeregTest, AFullQueueMakesTheCallerDeregisterItsOwnVictims) {
  // With the thread held at the gate, the queue fills up; then the gets go
  // on, deregistering their victims themselves.
  config_.max_regions = 1;
  const size_t bound = DeregistrationQueue::kMaxRegions;
  const size_t pages = bound + 8;
  char* many = static_cast<char*>(
      mmap(nullptr, 2 * pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(many, MAP_FAILED);
  state_->Close();
  Use(0);
  Use(2);
  ASSERT_TRUE(state_->WaitForWaiting(1));  // the thread holds one, at the gate
  size_t gets = 0;
  while (gets < pages && state_->deregistrations_on_caller.load() == 0) {
    auto r = cache().Acquire(many + 2 * gets * kPage, kPage, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(cache().Put(*r).ok());
    ++gets;
  }
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
  EXPECT_EQ(gets, bound) << "the queue took exactly its bound (one is at the gate)";
  EXPECT_EQ(cache().stats().dereg_queue_depth, bound);
  state_->Open();
  ASSERT_TRUE(cache().Flush().ok());
  munmap(many, 2 * pages * kPage);
}

TEST_F(AsyncDeregTest, TensOfThousandsOfUnmappedRegionsKeepTheQueueBoundedAndLeakNothing) {
  // 40,000 one-page regions, unmapped 1,000 at a time, each thousand taken
  // out of the index by the next get and handed over as one batch, faster
  // than the slowed background thread deregisters them: the queue fills to
  // its bound, the batches beyond it are deregistered by their callers, and
  // the queue never holds more than its bound.
  WatchMemory();
  config_.max_regions = 0;
  config_.bridge_bytes = 0;
  config_.sim_base_ns = config_.sim_page_ns = 0;
  state_->background_delay_us = 50;
  constexpr size_t kRegions = 40000, kPerUnmap = 1000;
  const size_t bound = DeregistrationQueue::kMaxRegions;
  const size_t span = 2 * kRegions * kPage;  // a region every other page: none merge
  char* area = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  for (size_t i = 0; i < kRegions; ++i) {
    auto r = cache().Acquire(area + 2 * i * kPage, kPage, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(cache().Put(*r).ok());
  }
  ASSERT_EQ(cache().stats().regions, kRegions);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> deepest{0};
  std::thread sampler([&] {
    while (!done.load()) {
      const uint64_t depth = cache().stats().dereg_queue_depth;
      if (depth > deepest.load()) deepest.store(depth);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  const int on_caller_before = state_->deregistrations_on_caller.load();
  for (size_t first = 0, page = 0; first < kRegions; first += kPerUnmap, ++page) {
    ASSERT_EQ(munmap(area + 2 * first * kPage, 2 * kPerUnmap * kPage), 0);
    Use(page);  // a miss: takes the thousand out of the index
    EXPECT_LE(cache().stats().dereg_queue_depth, bound);
  }
  EXPECT_GT(state_->deregistrations_on_caller.load() - on_caller_before, 0)
      << "batches beyond the bound were deregistered by their callers";
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  // (stats().regions counts a queued region until its deregistration.)
  EXPECT_EQ(cache().stats().regions, kRegions / kPerUnmap) << "only the gets' own regions";
  done.store(true);
  sampler.join();
  EXPECT_LE(deepest.load(), bound);
  EXPECT_GT(cache().stats().background_dereg_ns, 0u) << "the background thread took its share";
  ASSERT_TRUE(cache().Flush().ok());
  EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load());
}

TEST_F(AsyncDeregTest, OffDeregistersOnTheCallingThread) {
  config_.async_dereg = AsyncDereg::kOff;
  config_.max_regions = 1;
  Use(0);
  Use(2);
  EXPECT_EQ(state_->deregistrations.load(), 1) << "deregistered before the get returned";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, AutoIsOffForARegistrarThatPinsNothing) {
  config_.async_dereg = AsyncDereg::kAuto;  // sim without sim_mlock pins nothing
  config_.max_regions = 1;
  Use(0);
  Use(2);
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, ABatchSmallerThanAsyncDeregBytesIsDeregisteredByItsCaller) {
  config_.async_dereg_bytes = 2 * kPage;
  config_.max_regions = 1;
  auto use = [this](size_t page, size_t pages) {
    auto r = cache().Acquire(buf_ + page * kPage, pages * kPage, kRW);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(cache().Put(*r).ok());
  };
  use(0, 1);
  use(4, 2);  // evicts one page: deregistered here
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
  use(8, 1);  // evicts two pages: handed over
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_EQ(state_->deregistrations.load(), 2);
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, AnUnmappedBatchOfAsyncDeregInvalidatedBytesIsHandedOver) {
  WatchMemory();
  config_.async_dereg_bytes = size_t{64} << 20;
  config_.async_dereg_invalidated_bytes = 2 * kPage;
  auto r = cache().Acquire(buf_, 2 * kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(cache().Put(*r).ok());
  Unmap(0, 2);
  Use(4);  // takes the two-page region out of the index
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_EQ(state_->deregistrations.load(), 1);
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 0);
}

TEST_F(AsyncDeregTest, AnUnmappedBatchUnderBothThresholdsIsDeregisteredByItsCaller) {
  WatchMemory();
  config_.async_dereg_bytes = size_t{64} << 20;
  config_.async_dereg_invalidated_bytes = 2 * kPage;
  Use(0);
  Unmap(0);
  Use(2);
  EXPECT_EQ(state_->deregistrations.load(), 1) << "deregistered before the get returned";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, AnEvictedBatchIsNotHandedOverByTheInvalidatedThreshold) {
  config_.async_dereg_bytes = size_t{64} << 20;
  config_.async_dereg_invalidated_bytes = kPage;
  config_.max_regions = 1;
  auto r = cache().Acquire(buf_, 2 * kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(cache().Put(*r).ok());
  Use(4);  // evicts the two-page region, which no invalidation touched
  EXPECT_EQ(state_->deregistrations.load(), 1);
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 1);
}

TEST_F(AsyncDeregTest, AHeldUnmappedRegionOfAsyncDeregInvalidatedBytesIsHandedOverAtItsLastPut) {
  WatchMemory();
  config_.async_dereg_bytes = size_t{64} << 20;
  config_.async_dereg_invalidated_bytes = kPage;
  auto r = cache().Acquire(buf_, kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  const uint64_t handle = GetRegionInfo(*r).handle;
  Unmap(0);
  Use(2);  // takes page 0's region out of the index; page 2's is under the key: inline
  EXPECT_TRUE(state_->Live(handle)) << "a held region keeps its registration";
  ASSERT_TRUE(cache().Put(*r).ok());
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_FALSE(state_->Live(handle));
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 0);
}

TEST_F(AsyncDeregTest, RetireCallbackRunsOncePerQueuedRegion) {
  config_.max_regions = 1;
  std::atomic<int> retired{0};
  cache().SetRetireCallback([&retired](void*, size_t, uint64_t) { retired++; });
  Use(0);
  Use(2);
  Use(4);
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  EXPECT_EQ(retired.load(), 2);
}

TEST_F(AsyncDeregTest, AWaiterDeregistersTheQueuedRegionsItselfAndSleepsOnlyForTheOneInFlight) {
  // Flush must not sleep behind the held background thread for the two
  // queued regions: it deregisters them itself, then waits for the one in
  // flight, which is let through only once that happened.
  QueueTwoBehindOneHeldAtTheGate();
  std::atomic<bool> flusher_helped{false};
  std::thread opener = OpenTheGateOnceTheCallerDeregistered(2, &flusher_helped);
  EXPECT_TRUE(cache().Flush().ok());
  opener.join();
  EXPECT_TRUE(flusher_helped) << "Flush slept while regions it waited for were still queued";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 3) << "pages 2, 4 and 6's regions";
  EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load());
  EXPECT_EQ(cache().stats().dereg_queue_depth, 0u);
}

TEST_F(AsyncDeregTest, MrcInvalidateReturnsOnlyOnceTheCachesQueuedDeregistrationsAreDone) {
  // Evictions left page 0's region in flight at the gate and pages 2's and
  // 4's waiting: an invalidate of page 2 returns only once none is left, so
  // that no registration over the range outlives it. It deregisters the
  // waiting ones itself, then waits for the one in flight.
  QueueTwoBehindOneHeldAtTheGate();
  std::atomic<bool> helped{false};
  std::thread opener = OpenTheGateOnceTheCallerDeregistered(2, &helped);
  ASSERT_TRUE(cache().Invalidate(buf_ + 2 * kPage, kPage).ok());
  EXPECT_EQ(cache().stats().dereg_queue_depth, 0u);
  opener.join();
  EXPECT_TRUE(helped) << "the invalidate slept while regions it waited for were still queued";
  EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load() + 1)
      << "only page 6's region, outside the range, stays registered";
}

TEST_F(AsyncDeregTest, TheBackgroundThreadRunsAsABatchThreadAtTheLowestPriority) {
  config_.max_regions = 1;
  Use(0);
  Use(2);  // starts the background thread
  ASSERT_TRUE(testing::WaitForQueuedDeregistrations(cache()));
  const pid_t worker = testing::ThreadNamed("mrc-dereg");
  ASSERT_NE(worker, 0) << "no thread named mrc-dereg";
  EXPECT_EQ(sched_getscheduler(worker), SCHED_BATCH);
  errno = 0;
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(worker)), DeregistrationQueue::kWorkerNice);
  EXPECT_EQ(errno, 0);
}

// Sanitizers and fork (tests/reliability/fork_test.cc says why): GCC's ASan
// can hang a child that allocates, TSan cannot start a thread in a child.
constexpr bool kAsan = mrcache::testing::UnderAsan();
constexpr bool kTsan = mrcache::testing::UnderTsan();

TEST_F(AsyncDeregTest, ForkWaitsForQueuedDeregistrationsAndTheChildInheritsNone) {
  if (kAsan) GTEST_SKIP() << "ASan's allocator may hang a fork child (fork_test.cc)";
  config_.max_regions = 1;
  state_->dereg_delay_us = 50000;
  Use(0);
  Use(2);  // page 0's deregistration takes 50 ms on the background thread
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    // The parent's cache: nothing of it waits in the child's queue.
    _exit(cache().stats().dereg_queue_depth == 0 ? 0 : 1);
  }
  EXPECT_EQ(state_->deregistrations.load(), 1) << "done before fork() returned";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST_F(AsyncDeregTest, ForkDeregistersTheQueuedRegionsItselfAndWaitsOnlyForTheOneInFlight) {
  if (kAsan) GTEST_SKIP() << "ASan's allocator may hang a fork child (fork_test.cc)";
  QueueTwoBehindOneHeldAtTheGate();
  std::atomic<bool> forker_helped{false};
  std::thread opener = OpenTheGateOnceTheCallerDeregistered(2, &forker_helped);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  opener.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(forker_helped) << "fork() slept while regions it waited for were still queued";
  EXPECT_EQ(state_->deregistrations_on_caller.load(), 2) << "pages 2 and 4's regions";
  EXPECT_EQ(state_->deregistrations.load(), 3) << "and page 0's, before fork() returned";
}

TEST_F(AsyncDeregTest, ANewCacheInAForkChildDeregistersInTheBackground) {
  if (kAsan) GTEST_SKIP() << "ASan's allocator may hang a fork child (fork_test.cc)";
  if (kTsan) GTEST_SKIP() << "TSan cannot start a thread in a fork child";
  config_.max_regions = 1;
  Use(0);
  Use(2);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    auto state = std::make_shared<GateState>();
    auto c =
        Cache::Create(config_, std::make_unique<GatedRegistrar>(MakeSimRegistrar(config_), state));
    if (!c.ok()) _exit(2);
    for (size_t page = 4; page < 10; page += 2) {
      auto r = (*c)->Acquire(buf_ + page * kPage, kPage, kRW);
      if (!r.ok() || !(*c)->Put(*r).ok()) _exit(3);
    }
    if (!testing::WaitForQueuedDeregistrations(**c)) _exit(4);
    if (state->deregistrations.load() != 2 || state->deregistrations_on_caller.load() != 0)
      _exit(5);
    c->reset();
    _exit(state->registrations.load() == state->deregistrations.load() ? 0 : 6);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// Deregistrations slowed on the background thread, so that they are still
// queued when the pin budget runs out.
// Counts what it registers and deregisters (the child's own counters).
std::atomic<int> g_slow_registrations{0}, g_slow_deregistrations{0};

class SlowDeregistrar : public ForwardingRegistrar {
 public:
  using ForwardingRegistrar::ForwardingRegistrar;
  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    absl::StatusOr<Registration> reg = inner().Register(addr, length, access);
    if (reg.ok()) g_slow_registrations++;
    return reg;
  }
  absl::Status Deregister(const Registration& reg) override {
    usleep(100000);
    g_slow_deregistrations++;
    return inner().Deregister(reg);
  }
};

// The pin budget tests' cache settings: no monitor, merging or prefault,
// so that each get registers exactly its buffer.
Config PinningCacheConfig() {
  Config config;
  config.monitor = "none";
  config.max_merge_bytes = 0;
  config.stats_shm = false;
  config.prefault_bytes = 0;
  return config;
}

// A cache over the uring registrar (which pins under RLIMIT_MEMLOCK) behind
// SlowDeregistrar, or the error that kept it from being made.
absl::StatusOr<std::unique_ptr<Cache>> MakePinningCache(const Config& config) {
  auto uring = MakeUringRegistrar(config);
  if (!uring.ok()) return uring.status();
  return Cache::Create(config, std::make_unique<SlowDeregistrar>(std::move(*uring)));
}

struct BudgetOutcome {
  int create_errno = 0;
  int get_errno = 0;  // of the first get that failed
  int gets = 0;       // that succeeded
  uint64_t budget = 0, wait_ns = 0;
  int registrations = 0, deregistrations = 0;  // at the end
};

// Four buffers of a fifth of the budget each are cached, then unmapped (the
// next get takes them out of the index): their deregistrations wait in the
// queue (100 ms each) while still counted as pinned. A fifth buffer, held, fills the budget; a
// sixth must wait for the queue, as nothing of its own cache can be evicted for it.
BudgetOutcome FillTheBudgetWithQueuedDeregistrations() {
  BudgetOutcome out;
  Config config = PinningCacheConfig();
  config.monitor = Config().monitor;
  config.async_dereg_bytes = 0;
  absl::StatusOr<std::unique_ptr<Cache>> cache = MakePinningCache(config);
  if (!cache.ok()) {
    out.create_errno = StatusToErrno(cache.status());
    return out;
  }
  out.budget = (*cache)->stats().pin_budget_bytes;
  // At most a quarter of the budget: each is cached, not served alone.
  const size_t each = (out.budget / 5) / kPage * kPage;
  constexpr size_t kCount = 6;
  const size_t stride = each + kPage;  // apart: nothing merges
  char* mem = static_cast<char*>(
      mmap(nullptr, kCount * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED || each == 0) {
    out.create_errno = ENOMEM;
    return out;
  }
  Region* held = nullptr;
  for (size_t i = 0; i < kCount; ++i) {
    auto r = (*cache)->Acquire(mem + i * stride, each, kRW);
    if (!r.ok()) {
      out.get_errno = StatusToErrno(r.status());
      break;
    }
    ++out.gets;
    if (i == 4) {
      held = *r;
      continue;
    }
    (void)(*cache)->Put(*r);
    if (i == 3) munmap(mem, 4 * stride);
  }
  if (held != nullptr) (void)(*cache)->Put(held);
  out.wait_ns = (*cache)->stats().dereg_wait_ns;
  cache->reset();
  out.registrations = g_slow_registrations.load();
  out.deregistrations = g_slow_deregistrations.load();
  munmap(mem + 4 * stride, (kCount - 4) * stride);
  return out;
}

TEST(AsyncDeregBudgetTest, UnderAPinBudgetAGetWaitsForQueuedDeregistrationsInsteadOfFailing) {
  auto child = mrcache_test::RunWithLowMemlock<BudgetOutcome>(
      size_t{8} << 20, FillTheBudgetWithQueuedDeregistrations);
  ASSERT_TRUE(child.child_ok);
  ASSERT_EQ(child.setup_errno, 0) << std::strerror(child.setup_errno);
  const BudgetOutcome& out = child.outcome;
  if (out.create_errno != 0) {
    GTEST_SKIP() << "no uring cache in an unprivileged child: " << std::strerror(out.create_errno);
  }
  ASSERT_GT(out.budget, 0u) << "RLIMIT_MEMLOCK binds in the child";
  EXPECT_EQ(out.gets, 6) << "get failed: " << std::strerror(out.get_errno);
  EXPECT_GT(out.wait_ns, 0u) << "the get past the budget waited for the queue";
  EXPECT_EQ(out.registrations, out.deregistrations);
}

struct InvalidatedOutcome {
  int create_errno = 0;
  int get_errno = 0;
  uint64_t budget = 0;
  uint64_t background_ns = 0;  // the worker's deregistration time, after the invalidation
  int registrations = 0, deregistrations = 0;  // at the end
};

// A buffer of a tenth of the pin budget is cached and unmapped (a get of
// the page after it takes it out of the index), while another buffer of
// `held_fraction` of the budget is held (none if 0). With async_dereg_bytes
// far above both, only the rule for unmapped memory
// (async_dereg_invalidated_bytes) can hand its registration to the
// background thread.
InvalidatedOutcome InvalidateBesideAHeldBuffer(double held_fraction) {
  InvalidatedOutcome out;
  Config config = PinningCacheConfig();
  config.async_dereg = AsyncDereg::kOn;
  config.async_dereg_bytes = size_t{1} << 30;
  config.async_dereg_invalidated_bytes = 2 * kPage;  // above the page the drain gets
  config.monitor = Config().monitor;
  absl::StatusOr<std::unique_ptr<Cache>> cache = MakePinningCache(config);
  if (!cache.ok()) {
    out.create_errno = StatusToErrno(cache.status());
    return out;
  }
  out.budget = (*cache)->stats().pin_budget_bytes;
  const size_t small = (out.budget / 10) / kPage * kPage;
  const size_t held_bytes =
      static_cast<size_t>(static_cast<double>(out.budget) * held_fraction) / kPage * kPage;
  const size_t total = small + kPage + held_bytes;
  char* mem = static_cast<char*>(
      mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED || small == 0) {
    out.create_errno = ENOMEM;
    return out;
  }
  Region* held = nullptr;
  if (held_bytes != 0) {
    auto h = (*cache)->Acquire(mem + small + kPage, held_bytes, kRW);
    if (!h.ok()) out.get_errno = StatusToErrno(h.status());
    if (h.ok()) held = *h;
  }
  auto r = (*cache)->Acquire(mem, small, kRW);
  if (!r.ok()) {
    out.get_errno = StatusToErrno(r.status());
  } else {
    (void)(*cache)->Put(*r);
    munmap(mem, small);
    auto drain = (*cache)->Acquire(mem + small, kPage, kRW);  // a miss: takes it out
    if (!drain.ok()) out.get_errno = StatusToErrno(drain.status());
    if (drain.ok()) (void)(*cache)->Put(*drain);
    (void)testing::WaitForQueuedDeregistrations(**cache);
  }
  out.background_ns = (*cache)->stats().background_dereg_ns;
  if (held != nullptr) (void)(*cache)->Put(held);
  cache->reset();
  out.registrations = g_slow_registrations.load();
  out.deregistrations = g_slow_deregistrations.load();
  munmap(mem + small, total - small);
  return out;
}

TEST(AsyncDeregBudgetTest, AnUnmappedBatchIsHandedOverWhileAtMostHalfThePinBudgetIsUsed) {
  auto child = mrcache_test::RunWithLowMemlock<InvalidatedOutcome>(
      size_t{8} << 20, [] { return InvalidateBesideAHeldBuffer(0.3); });
  ASSERT_TRUE(child.child_ok);
  ASSERT_EQ(child.setup_errno, 0) << std::strerror(child.setup_errno);
  const InvalidatedOutcome& out = child.outcome;
  if (out.create_errno != 0) {
    GTEST_SKIP() << "no uring cache in an unprivileged child: " << std::strerror(out.create_errno);
  }
  ASSERT_EQ(out.get_errno, 0) << std::strerror(out.get_errno);
  EXPECT_GT(out.background_ns, 0u) << "the background thread deregistered it";
  EXPECT_EQ(out.registrations, out.deregistrations);
}

TEST(AsyncDeregBudgetTest, AnUnmappedBatchIsDeregisteredByItsCallerOverHalfThePinBudget) {
  auto child = mrcache_test::RunWithLowMemlock<InvalidatedOutcome>(
      size_t{8} << 20, [] { return InvalidateBesideAHeldBuffer(0.6); });
  ASSERT_TRUE(child.child_ok);
  ASSERT_EQ(child.setup_errno, 0) << std::strerror(child.setup_errno);
  const InvalidatedOutcome& out = child.outcome;
  if (out.create_errno != 0) {
    GTEST_SKIP() << "no uring cache in an unprivileged child: " << std::strerror(out.create_errno);
  }
  ASSERT_EQ(out.get_errno, 0) << std::strerror(out.get_errno);
  EXPECT_EQ(out.background_ns, 0u) << "its caller deregistered it";
  EXPECT_EQ(out.registrations, out.deregistrations);
}

}  // namespace
}  // namespace mrcache
