// fault_injection_test.cc: registrar failures and slow registrars.
//
// The contract under test (mrcache/cache.h, the miss path in cache_impl.cc):
//  - ENOMEM / EAGAIN from the registrar: the cache evicts unused regions,
//    least recently used first, until the request fits, and retries; one
//    failure is always retried; a second failure of the requested pages with
//    nothing left to evict surfaces with the same errno.
//  - EFAULT: surfaces at once, unless the cache had widened the range
//    (alignment or a merge), in which case it retries exactly the requested
//    pages once.
//  - any other errno (EINTR, EIO, EPERM, ...): surfaces at once, unchanged.
//    EINTR is not retried by the cache (see the test that pins it).
//  - whatever fails, nothing leaks: registrations == deregistrations once the
//    cache is gone, and a failed get leaves the cache usable.
//  - a slow registrar (every call sleeps) holds no cache lock: concurrent gets,
//    puts and invalidations make progress, and no stale region is returned.
// Every Register call failing is counted; the sweep prints
// "RELIABILITY faults injected=N" (the figure in docs/RELIABILITY.md).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/mrcache.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/counting_registrar.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

// Faults injected by every test in this binary (printed by the last test).
std::atomic<int> g_faults{0};

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    len_ = 64 * kPage;
    buf_ = static_cast<char*>(
        mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
    config_.monitor = "none";
    config_.sim_base_ns = 0;
    config_.sim_page_ns = 0;
  }

  void TearDown() override {
    cache_.reset();
    g_faults += state_->faults_injected.load();
    EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load())
        << "leaked registrations";
    EXPECT_TRUE(state_->live.empty());
    munmap(buf_, len_);
  }

  Cache& cache() {
    if (!cache_) {
      auto c = Cache::Create(
          config_, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config_), state_));
      EXPECT_TRUE(c.ok()) << c.status();
      cache_ = std::move(*c);
    }
    return *cache_;
  }

  // 0 or the errno; a successful region is put at once.
  int GetPut(size_t page, size_t pages = 1) {
    auto r = cache().Acquire(buf_ + page * kPage, pages * kPage, kRW);
    if (!r.ok()) return StatusToErrno(r.status());
    EXPECT_TRUE(cache().Put(*r).ok());
    return 0;
  }

  Region* Get(size_t page, size_t pages = 1, int access = kRW) {
    auto r = cache().Acquire(buf_ + page * kPage, pages * kPage, access);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nullptr;
  }

  Config config_;
  std::shared_ptr<RegistrarCounters> state_ = std::make_shared<RegistrarCounters>();
  std::unique_ptr<Cache> cache_;
  char* buf_ = nullptr;
  size_t len_ = 0;
};

// ---- out of resources: evict, retry once ----

class OutOfResourcesTest : public FaultInjectionTest, public ::testing::WithParamInterface<int> {};

TEST_P(OutOfResourcesTest, OneFailureIsRetriedAfterEvictingTheLeastRecentlyUsedUntilItFits) {
  config_.max_merge_bytes = 0;
  ASSERT_EQ(GetPut(0), 0);
  ASSERT_EQ(GetPut(2), 0);
  Region* held = Get(4);
  state_->fail_errno = GetParam();
  state_->fail_count = 1;
  const int calls = state_->register_calls;
  EXPECT_EQ(GetPut(8), 0);
  EXPECT_EQ(state_->register_calls - calls, 2) << "one failed call, one retry";
  EXPECT_EQ(state_->deregistrations.load(), 1)
      << "the request needs one page: the least recently used region went, the other stayed, "
         "the held one was kept";
  EXPECT_EQ(cache().stats().evictions, 1u);
  EXPECT_EQ(cache().stats().registrar_failures, 0u);
  const int registrations = state_->registrations;
  EXPECT_EQ(GetPut(2), 0);
  EXPECT_EQ(state_->registrations, registrations)
      << "the more recent unused region is still cached";
  ASSERT_TRUE(cache().Put(held).ok());
}

TEST_P(OutOfResourcesTest, OneFailureIsRetriedEvenWithNothingToEvict) {
  state_->fail_errno = GetParam();
  state_->fail_count = 1;
  EXPECT_EQ(GetPut(0), 0);
  EXPECT_EQ(state_->register_calls.load(), 2);
}

TEST_P(OutOfResourcesTest, SecondFailureSurfacesWithTheSameErrno) {
  Region* held = Get(0);
  ASSERT_EQ(GetPut(10), 0);
  state_->fail_errno = GetParam();
  state_->fail_count = 5;
  const int calls = state_->register_calls;
  EXPECT_EQ(GetPut(20), GetParam());
  EXPECT_EQ(state_->register_calls - calls, 2) << "exactly one retry";
  EXPECT_EQ(cache().stats().registrar_failures, 1u);
  state_->fail_count = 0;
  EXPECT_EQ(GetPut(20), 0) << "the cache is usable after the failure";
  ASSERT_TRUE(cache().Put(held).ok());
}

INSTANTIATE_TEST_SUITE_P(Errnos, OutOfResourcesTest, ::testing::Values(ENOMEM, EAGAIN),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == ENOMEM ? "ENOMEM" : "EAGAIN");
                         });

// ---- other errors surface at once ----

class SurfacedErrnoTest : public FaultInjectionTest, public ::testing::WithParamInterface<int> {};

TEST_P(SurfacedErrnoTest, FailureSurfacesAtOnceAndEvictsNothing) {
  config_.max_merge_bytes = 0;
  ASSERT_EQ(GetPut(0), 0);
  state_->fail_errno = GetParam();
  state_->fail_count = 1;
  EXPECT_EQ(GetPut(8), GetParam());
  EXPECT_EQ(state_->register_calls.load(), 2) << "no retry";
  EXPECT_EQ(state_->deregistrations.load(), 0) << "nothing evicted";
  EXPECT_EQ(cache().stats().registrar_failures, 1u);
  EXPECT_EQ(GetPut(8), 0);
}

INSTANTIATE_TEST_SUITE_P(Errnos, SurfacedErrnoTest, ::testing::Values(EFAULT, EINTR, EIO, EPERM),
                         [](const ::testing::TestParamInfo<int>& info) {
                           switch (info.param) {
                             case EFAULT:
                               return std::string("EFAULT");
                             case EINTR:
                               return std::string("EINTR");
                             case EIO:
                               return std::string("EIO");
                             default:
                               return std::string("EPERM");
                           }
                         });

// EINTR pins the current choice: the cache does not retry a registrar call
// interrupted by a signal; the caller sees EINTR and may retry the get.
TEST_F(FaultInjectionTest, EintrIsNotRetriedByTheCache) {
  state_->fail_errno = EINTR;
  state_->fail_count = 1;
  EXPECT_EQ(GetPut(0), EINTR);
  EXPECT_EQ(state_->register_calls.load(), 1);
}

TEST_F(FaultInjectionTest, EfaultOnAWidenedRangeRetriesExactlyTheRequestedPages) {
  config_.alignment = 16 * kPage;  // widens local-only requests (remote ones stay on their pages)
  state_->fail_errno = EFAULT;
  state_->fail_count = 1;
  Region* r = Get(17, 1, kAccessLocalWrite);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(state_->register_calls.load(), 2);
  RegionInfo info = GetRegionInfo(r);
  EXPECT_EQ(info.addr, buf_ + 17 * kPage);
  EXPECT_EQ(info.length, kPage);
  ASSERT_TRUE(cache().Put(r).ok());
}

TEST_F(FaultInjectionTest, EfaultOnAMergedRangeRetriesExactlyTheRequestedPages) {
  Region* a = Get(0, 2);
  state_->fail_errno = EFAULT;
  state_->fail_count = 1;
  Region* b = Get(1, 2);  // overlaps a: the first attempt registers the union
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(state_->register_calls.load(), 3);
  EXPECT_EQ(GetRegionInfo(b).addr, buf_ + kPage);
  EXPECT_EQ(GetRegionInfo(b).length, 2 * kPage);
  ASSERT_TRUE(cache().Put(a).ok());
  ASSERT_TRUE(cache().Put(b).ok());
}

TEST_F(FaultInjectionTest, FailedDeregistrationIsReportedAndCountedAsReleased) {
  ASSERT_EQ(GetPut(0), 0);
  state_->fail_deregister = 1;
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(cache().Flush().ok());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("deregistration failed"), std::string::npos) << err;
  EXPECT_EQ(cache().stats().regions, 0u);
  EXPECT_EQ(cache().stats().deregistrations, 1u);
}

// ---- fail the Nth call ----

// A fixed workload (gets with holds, puts, invalidations) whose Nth registrar
// call fails. Returns the errnos of the gets that failed.
std::vector<int> RunWorkloadFailingNth(int err, int nth, size_t max_merge_bytes, int* faults,
                                       int* calls) {
  char* buf = static_cast<char*>(
      mmap(nullptr, 64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto state = std::make_shared<RegistrarCounters>();
  state->fail_errno = err;
  state->fail_nth = nth;
  Config config;
  config.monitor = "none";
  config.sim_base_ns = config.sim_page_ns = 0;
  config.max_regions = 4;
  config.max_merge_bytes = max_merge_bytes;
  std::vector<int> failures;
  {
    auto c =
        Cache::Create(config, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config), state));
    EXPECT_TRUE(c.ok());
    Cache& cache = **c;
    std::mt19937 rng(nth * 31 + err);
    std::vector<Region*> held;
    for (int op = 0; op < 40; ++op) {
      unsigned dice = rng() % 10;
      if (dice < 6) {
        size_t page = rng() % 60, pages = 1 + rng() % 4;
        auto r = cache.Acquire(buf + page * kPage, pages * kPage, kRW);
        if (!r.ok()) {
          failures.push_back(StatusToErrno(r.status()));
          continue;
        }
        RegionInfo info = GetRegionInfo(*r);
        EXPECT_LE(static_cast<char*>(info.addr), buf + page * kPage);
        EXPECT_GE(static_cast<char*>(info.addr) + info.length, buf + (page + pages) * kPage);
        held.push_back(*r);
      } else if (dice < 9 && !held.empty()) {
        EXPECT_TRUE(cache.Put(held.back()).ok());
        held.pop_back();
      } else {
        EXPECT_TRUE(cache.Invalidate(buf + (rng() % 60) * kPage, 2 * kPage).ok());
      }
    }
    for (Region* r : held) {
      EXPECT_TRUE(cache.Put(r).ok());
    }
  }
  EXPECT_EQ(state->registrations.load(), state->deregistrations.load())
      << "errno " << err << ", call " << nth;
  EXPECT_TRUE(state->live.empty());
  munmap(buf, 64 * kPage);
  *faults = state->faults_injected;
  *calls = state->register_calls;
  return failures;
}

TEST(FailNthCallTest, EveryCallOfAWorkloadFailingInTurnSurfacesOrRecoversWithoutLeaks) {
  int injected = 0;
  for (int err : {ENOMEM, EAGAIN, EFAULT, EINTR}) {
    for (size_t merge : {size_t{0}, size_t{1} << 30}) {
      for (int nth = 1;; ++nth) {
        int faults = 0, calls = 0;
        std::vector<int> failures = RunWorkloadFailingNth(err, nth, merge, &faults, &calls);
        if (calls < nth) break;  // the workload made fewer calls: every one has failed once
        injected += faults;
        EXPECT_EQ(faults, 1);
        if (err == ENOMEM || err == EAGAIN) {
          EXPECT_TRUE(failures.empty()) << "one out-of-resources failure is always retried";
        } else if (err == EFAULT && merge != 0) {
          // A merged (widened) attempt falls back to the exact pages.
          EXPECT_LE(failures.size(), 1u);
          for (int f : failures) {
            EXPECT_EQ(f, EFAULT);
          }
        } else {
          ASSERT_EQ(failures.size(), 1u) << "errno " << err << ", call " << nth;
          EXPECT_EQ(failures[0], err);
        }
      }
    }
  }
  g_faults += injected;
  EXPECT_GT(injected, 100);
}

// ---- slow registrar ----

TEST_F(FaultInjectionTest, SlowRegistrarHoldsNoLockAndReturnsNothingStale) {
  config_.max_regions = 8;
  state_->register_delay_us = 500;
  state_->deregister_delay_us = 200;
  cache();
  constexpr size_t kPages = 32;
  // invalidated_before[p]: the registration count read just before the last
  // invalidation of page p started. A region registered no later than that
  // must never be returned by a get that starts after the invalidation.
  std::vector<std::atomic<uint64_t>> invalidated_before(kPages);
  std::atomic<bool> stop{false};
  std::atomic<int> stale{0}, errors{0}, successes{0};
  auto registered = [this] {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->registered;
  };
  auto worker = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop.load()) {
      size_t page = rng() % (kPages - 2), pages = 1 + rng() % 2;
      std::vector<uint64_t> before(pages);
      for (size_t i = 0; i < pages; ++i) before[i] = invalidated_before[page + i].load();
      auto r = cache().Acquire(buf_ + page * kPage, pages * kPage, kRW);
      if (!r.ok()) {
        // EAGAIN needs the requested pages invalidated during 16 registrations
        // in a row; one page in 32 is invalidated per millisecond, each
        // registration takes 0.5 ms: it does not happen, and is an error.
        ++errors;
        ADD_FAILURE() << r.status();
        continue;
      }
      ++successes;
      uint64_t seq;
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        seq = state_->sequence.at(GetRegionInfo(*r).handle);
      }
      for (uint64_t b : before) {
        if (seq <= b) ++stale;
      }
      if (!cache().Put(*r).ok()) ++errors;
    }
  };
  std::thread a(worker, 1), b(worker, 2);
  std::thread inval([&] {
    std::mt19937 rng(3);
    for (int i = 0; i < 200; ++i) {
      size_t page = rng() % kPages;
      uint64_t before = registered();
      ASSERT_TRUE(cache().Invalidate(buf_ + page * kPage, kPage).ok());
      invalidated_before[page].store(before);
      usleep(1000);
    }
  });
  inval.join();
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(stale.load(), 0);
  // 200 invalidations 1 ms apart keep two workers busy for 200+ ms, and a
  // get costs at most one 0.5 ms registration plus a 0.2 ms deregistration.
  EXPECT_GE(successes.load(), 200) << "the stale checks ran on too few samples";
}

// ---- through the C API: custom registrar callbacks that fail ----

struct FailingOps {
  int err = 0;  // returned by every reg call while nonzero
  int regs = 0, deregs = 0;
};

int FailingReg(void* ctx, void* addr, size_t length, int, uint64_t* handle, uint32_t* lkey,
               uint32_t* rkey) {
  auto* f = static_cast<FailingOps*>(ctx);
  if (f->err != 0) return f->err;
  ++f->regs;
  *handle = reinterpret_cast<uintptr_t>(addr);
  *lkey = *rkey = 1;
  return 0;
}

int CountingDereg(void* ctx, uint64_t) {
  ++static_cast<FailingOps*>(ctx)->deregs;
  return 0;
}

TEST(CApiFaultTest, MrcGetReturnsTheErrnoOfTheCustomRegistrar) {
  for (int err : {ENOMEM, EAGAIN, EFAULT, EINTR, EIO, EACCES}) {
    FailingOps ops_state;
    mrc_registrar_ops_t ops{FailingReg, CountingDereg};
    mrc_config_t* cfg;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", "none"), 0);
    mrc_cache_t* cache;
    ASSERT_EQ(mrc_cache_create_custom(cfg, &ops, &ops_state, &cache), 0);
    std::vector<char> buf(4 * kPage);
    mrc_region_t* r;
    ASSERT_EQ(mrc_get(cache, buf.data(), kPage, 1, &r), 0);
    ASSERT_EQ(mrc_put(cache, r), 0);
    ops_state.err = err;
    EXPECT_EQ(mrc_get(cache, buf.data() + 2 * kPage, kPage, 1, &r), err) << std::strerror(err);
    g_faults += (err == ENOMEM || err == EAGAIN) ? 2 : 1;
    mrc_cache_destroy(cache);
    mrc_config_destroy(cfg);
    EXPECT_EQ(ops_state.regs, ops_state.deregs) << std::strerror(err);
  }
}

// Prints the total once every test has run (parameterised suites are
// registered late, so a last TEST would not see them all).
class FaultSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    EXPECT_GT(g_faults.load(), 0);
    std::printf("RELIABILITY faults injected=%d\n", g_faults.load());
  }
};
::testing::Environment* const g_summary = ::testing::AddGlobalTestEnvironment(new FaultSummary);

}  // namespace
}  // namespace mrcache
