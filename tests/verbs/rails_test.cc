// Rails: one cache over the PDs of four softverbs devices (SOFTVERBS_DEVICES=4),
// registering each region lazily on the rails its gets ask for
// (mrc_cache_create_rails, mrc_get_rails, mrc_region_rail_info), and the
// same through the C++ API and the custom rails callbacks.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mrcache/cache.h"
#include "mrcache/mrcache.h"
#include "mrcache/registrars/pin_budget.h"
#include "tests/softverbs/rc_end.h"
#include "tests/softverbs/softverbs_client.h"

namespace {

using softverbs::RcEnd;

constexpr int kRails = 4;
constexpr int kBuffers = 256;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;

// The two rails buffer b is ever asked on: b % 4 and (b + 1) % 4.
uint64_t RailOfGet(int b, int round) { return uint64_t{1} << ((b + round % 2) % kRails); }
uint64_t RailsOfBuffer(int b) { return RailOfGet(b, 0) | RailOfGet(b, 1); }

class Rails : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    before_ = client_.Counters();
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    list_ = ibv_get_device_list(&ndevices_);
    ASSERT_NE(list_, nullptr) << "errno " << errno;
    ASSERT_EQ(ndevices_, kRails) << "run with SOFTVERBS_DEVICES=4";
    for (int i = 0; i < kRails; ++i) {
      ASSERT_TRUE(rail_end_[i].Open(list_[i])) << "errno " << errno;
      pds_[i] = rail_end_[i].pd;
    }
    // Buffers one page each, a page apart: no two regions can merge.
    void* p = mmap(nullptr, 2 * kBuffers * page_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    arena_ = static_cast<char*>(p);
    memset(arena_, 'a', 2 * kBuffers * page_);
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "bridge_bytes", "0"), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "remote_keys", "shared"), 0);
    ASSERT_EQ(mrc_cache_create_rails(cfg_, pds_, kRails, &cache_), 0);
  }

  void TearDown() override {
    if (cache_ != nullptr) {
      mrc_stats_t s;
      ASSERT_EQ(mrc_stats(cache_, &s), 0);
      mrc_cache_destroy(cache_);
    }
    mrc_config_destroy(cfg_);
    if (arena_ != nullptr) munmap(arena_, 2 * kBuffers * page_);
    for (RcEnd& end : requester_) end.Close();
    for (RcEnd& end : rail_end_) end.Close();
    if (list_ != nullptr) ibv_free_device_list(list_);
    const softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "the test leaked MRs";
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations);
  }

  char* Buffer(int b) const { return arena_ + 2 * b * page_; }

  mrc_rail_stats_t RailStats(int rail) const {
    mrc_rail_stats_t s{};
    EXPECT_EQ(mrc_rail_stats(cache_, rail, &s), 0);
    return s;
  }

  uint64_t Registrations() const { return client_.Counters().registrations; }

  // Waits (10 s at most) until the cache's background deregistration queue
  // (async_dereg) is empty; false if it never was.
  bool QueueEmptied() const {
    for (int i = 0; i < 10000; ++i) {
      mrc_stats_t s{};
      if (mrc_stats(cache_, &s) != 0) return false;
      if (s.dereg_queue_depth == 0) return true;
      usleep(1000);
    }
    return false;
  }

  // Gets and puts buffer b on `rails`.
  void GetAndPut(int b, uint64_t rails) {
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, rails, &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }

  softverbs::Client client_;
  softverbs_counters before_{};
  size_t page_ = 0;
  ibv_device** list_ = nullptr;
  int ndevices_ = 0;
  RcEnd rail_end_[kRails];  // rail i is rail_end_[i]'s PD, on device softverbs<i>
  RcEnd requester_[2];
  ibv_pd* pds_[kRails] = {};
  char* arena_ = nullptr;
  mrc_config_t* cfg_ = nullptr;
  mrc_cache_t* cache_ = nullptr;
};

TEST_F(Rails, StripedGetsRegisterEachRegionOnlyOnTheRailsAsked) {
  const uint64_t registered_before = Registrations();
  for (int i = 0; i < 10000; ++i) {
    const int b = i % kBuffers;
    const uint64_t rail = RailOfGet(b, i / kBuffers);
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, rail, &r), 0) << i;
    mrc_region_info_t info;
    ASSERT_EQ(mrc_region_rail_info(r, __builtin_ctzll(rail), &info), 0);
    EXPECT_LE(static_cast<void*>(info.addr), static_cast<void*>(Buffer(b)));
    for (int other = 0; other < kRails; ++other) {
      if (!(RailsOfBuffer(b) & (uint64_t{1} << other))) {
        EXPECT_EQ(mrc_region_rail_info(r, other, &info), ENOENT) << "buffer " << b;
      }
    }
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  for (int rail = 0; rail < kRails; ++rail) {
    // Each rail is asked for by half of the buffers, each registered once.
    EXPECT_EQ(RailStats(rail).registrations, kBuffers / 2u) << "rail " << rail;
    EXPECT_EQ(RailStats(rail).regions, kBuffers / 2u) << "rail " << rail;
  }
  EXPECT_EQ(Registrations() - registered_before, 2u * kBuffers);
}

TEST_F(Rails, AHitRegistersNothing) {
  for (int b = 0; b < kBuffers; ++b) {
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, RailsOfBuffer(b), &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  const uint64_t registered = Registrations();
  mrc_stats_t before;
  ASSERT_EQ(mrc_stats(cache_, &before), 0);
  for (int i = 0; i < 10000; ++i) {
    const int b = i % kBuffers;
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, RailOfGet(b, i / kBuffers), &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  mrc_stats_t after;
  ASSERT_EQ(mrc_stats(cache_, &after), 0);
  EXPECT_EQ(Registrations(), registered);
  EXPECT_EQ(after.hits - before.hits, 10000u);
  EXPECT_EQ(after.misses, before.misses);
}

TEST_F(Rails, AHitAddsOnlyTheRailTheRegionLacks) {
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 1u << 1, &r), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  const uint64_t registered = Registrations();
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, (1u << 1) | (1u << 3), &r), 0);
  EXPECT_EQ(Registrations() - registered, 1u);
  mrc_region_info_t one, three;
  ASSERT_EQ(mrc_region_rail_info(r, 1, &one), 0);
  ASSERT_EQ(mrc_region_rail_info(r, 3, &three), 0);
  EXPECT_EQ(one.addr, three.addr);
  EXPECT_EQ(one.length, three.length);
  EXPECT_NE(one.rkey, three.rkey);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  EXPECT_EQ(RailStats(1).registrations, 1u);
  EXPECT_EQ(RailStats(3).registrations, 1u);
}

TEST_F(Rails, AnRkeyOfRailOneWorksOnRailOneAndFailsOnRailTwo) {
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(requester_[i].Open(list_[0]));
  ASSERT_EQ(requester_[0].ConnectTo(rail_end_[1]), 0);
  ASSERT_EQ(rail_end_[1].ConnectTo(requester_[0]), 0);
  ASSERT_EQ(requester_[1].ConnectTo(rail_end_[2]), 0);
  ASSERT_EQ(rail_end_[2].ConnectTo(requester_[1]), 0);
  char* target = Buffer(7);
  memset(target, 'r', page_);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get_rails(cache_, target, page_, kAccess, (1u << 1) | (1u << 2), &r), 0);
  mrc_region_info_t rail1;
  ASSERT_EQ(mrc_region_rail_info(r, 1, &rail1), 0);
  std::vector<char> local(page_, 0);
  ibv_mr* mr[2];
  for (int i = 0; i < 2; ++i) {
    mr[i] = ibv_reg_mr(requester_[i].pd, local.data(), page_, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr[i], nullptr);
  }
  const uint64_t remote = reinterpret_cast<uintptr_t>(target);
  EXPECT_EQ(
      requester_[0].Rdma(IBV_WR_RDMA_READ, local.data(), page_, mr[0]->lkey, remote, rail1.rkey),
      IBV_WC_SUCCESS);
  EXPECT_EQ(local[page_ - 1], 'r');
  EXPECT_EQ(requester_[1].Rdma(IBV_WR_RDMA_READ, local.data(), 64, mr[1]->lkey, remote, rail1.rkey),
            IBV_WC_REM_ACCESS_ERR);
  for (ibv_mr* m : mr) EXPECT_EQ(ibv_dereg_mr(m), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
}

TEST_F(Rails, MunmapTakesTheRegionOffEveryRail) {
  // A mapping of its own, so that unmapping it releases only this region.
  char* p = static_cast<char*>(
      mmap(nullptr, page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  p[0] = 1;
  mrc_region_t* r = nullptr;
  const uint64_t rails = (1u << 0) | (1u << 1) | (1u << 3);
  ASSERT_EQ(mrc_get_rails(cache_, p, page_, kAccess, rails, &r), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  const uint64_t live = client_.Counters().live_mrs;
  ASSERT_EQ(munmap(p, page_), 0);
  // The next get that leaves the fast path drains the release. The
  // deregistration is inline for a page (async_dereg_invalidated_bytes is
  // bigger), on the background thread where that key is set lower: waited for.
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 1u << 2, &r), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  ASSERT_TRUE(QueueEmptied());
  EXPECT_EQ(client_.Counters().live_mrs, live - 3 + 1);
  for (int rail : {0, 1, 3}) {
    EXPECT_EQ(RailStats(rail).deregistrations, 1u) << "rail " << rail;
    EXPECT_EQ(RailStats(rail).regions, 0u) << "rail " << rail;
  }
  mrc_stats_t s;
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  EXPECT_EQ(s.invalidations, 1u);
}

TEST_F(Rails, EachRailsRegistrationCountsAgainstThePinBudget) {
  const mrcache::PinBudget& budget = mrcache::PinBudget::Process();
  const size_t pinned = budget.pinned();
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 0b0011, &r), 0);
  EXPECT_EQ(budget.pinned() - pinned, 2 * page_);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 0b1000, &r), 0);
  EXPECT_EQ(budget.pinned() - pinned, 3 * page_) << "a rail added by a hit pins too";
  ASSERT_EQ(mrc_put(cache_, r), 0);
  ASSERT_EQ(mrc_flush(cache_), 0);
  EXPECT_EQ(budget.pinned(), pinned);
}

TEST_F(Rails, DestroyDeregistersEveryRail) {
  for (int b = 0; b < kBuffers; ++b) {
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, RailsOfBuffer(b), &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  EXPECT_EQ(client_.Counters().live_mrs - before_.live_mrs, 2u * kBuffers);
  mrc_cache_destroy(cache_);
  cache_ = nullptr;
  EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs);
}

TEST_F(Rails, PerRailRegistrationsEqualDeregistrationsAfterFlush) {
  for (int b = 0; b < kBuffers; ++b) {
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, RailsOfBuffer(b), &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  ASSERT_EQ(mrc_flush(cache_), 0);
  for (int rail = 0; rail < kRails; ++rail) {
    const mrc_rail_stats_t s = RailStats(rail);
    EXPECT_EQ(s.registrations, s.deregistrations) << "rail " << rail;
    EXPECT_EQ(s.regions, 0u);
    EXPECT_EQ(s.registered_bytes, 0u);
  }
}

TEST_F(Rails, StatsCountEachRailsRegistrationAndDeregistration) {
  GetAndPut(0, 0b0011);
  GetAndPut(0, 0b1000);  // a hit adds rail 3
  mrc_stats_t s;
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  uint64_t per_rail = 0;
  for (int rail = 0; rail < kRails; ++rail) per_rail += RailStats(rail).registrations;
  EXPECT_EQ(s.registrations, 3u);
  EXPECT_EQ(s.registrations, per_rail);
  EXPECT_EQ(s.regions, 1u) << "regions counts each region once";
  ASSERT_EQ(mrc_flush(cache_), 0);
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  EXPECT_EQ(s.deregistrations, 3u);
  EXPECT_EQ(s.regions, 0u);
}

TEST_F(Rails, PinnedBytesCountARegionOncePerRailAsThePinBudgetDoes) {
  const mrcache::PinBudget& budget = mrcache::PinBudget::Process();
  const size_t pinned = budget.pinned();
  GetAndPut(0, 0b0011);
  GetAndPut(0, 0b1000);  // a hit adds rail 3
  mrc_stats_t s;
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  EXPECT_EQ(s.pinned_bytes, 3 * page_);
  EXPECT_EQ(s.pinned_bytes, budget.pinned() - pinned);
  ASSERT_EQ(mrc_flush(cache_), 0);
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.peak_pinned_bytes, 3 * page_);
  EXPECT_EQ(budget.pinned(), pinned);
}

TEST_F(Rails, MaxBytesCountsARegionOncePerRail) {
  mrc_cache_destroy(cache_);
  cache_ = nullptr;
  ASSERT_EQ(mrc_config_set(cfg_, "max_bytes", std::to_string(4 * page_).c_str()), 0);
  ASSERT_EQ(mrc_cache_create_rails(cfg_, pds_, kRails, &cache_), 0);
  GetAndPut(0, 0b1111);
  EXPECT_EQ(RailStats(3).regions, 1u) << "four rails of one page: within 4 pages";
  GetAndPut(1, 0b0001);
  mrc_stats_t s;
  ASSERT_EQ(mrc_stats(cache_, &s), 0);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.pinned_bytes, page_) << "buffer 0 left every rail";
  EXPECT_EQ(RailStats(3).regions, 0u);
}

TEST_F(Rails, MrcGetMeansRailZeroAndRegionInfoShowsRailZerosKeys) {
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(3), page_, kAccess, 1u << 2, &r), 0);
  mrc_region_info_t info;
  mrc_region_info(r, &info);
  EXPECT_EQ(info.lkey, 0u) << "not on rail 0 yet";
  ASSERT_EQ(mrc_put(cache_, r), 0);
  ASSERT_EQ(mrc_get(cache_, Buffer(3), page_, kAccess, &r), 0);
  mrc_region_info_t rail0;
  ASSERT_EQ(mrc_region_rail_info(r, 0, &rail0), 0);
  mrc_region_info(r, &info);
  EXPECT_EQ(info.lkey, rail0.lkey);
  EXPECT_EQ(info.rkey, rail0.rkey);
  EXPECT_EQ(info.addr, rail0.addr);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  EXPECT_EQ(mrc_cache_rails(cache_), kRails);
}

TEST_F(Rails, BadArgumentsFailWithEinvalOrEnoent) {
  mrc_cache_t* other = nullptr;
  EXPECT_EQ(mrc_cache_create_rails(cfg_, pds_, 0, &other), EINVAL);
  EXPECT_EQ(mrc_cache_create_rails(cfg_, pds_, 65, &other), EINVAL);
  EXPECT_EQ(mrc_cache_create_rails(cfg_, nullptr, 2, &other), EINVAL);
  EXPECT_EQ(mrc_cache_create_rails(cfg_, pds_, 2, nullptr), EINVAL);
  ibv_pd* with_null[2] = {pds_[0], nullptr};
  EXPECT_EQ(mrc_cache_create_rails(cfg_, with_null, 2, &other), EINVAL);
  EXPECT_EQ(other, nullptr);
  mrc_region_t* r = nullptr;
  EXPECT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 0, &r), EINVAL);
  EXPECT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 1u << kRails, &r), EINVAL);
  EXPECT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, uint64_t{1} << 63, &r), EINVAL);
  ASSERT_EQ(mrc_get_rails(cache_, Buffer(0), page_, kAccess, 1u << 1, &r), 0);
  mrc_region_info_t info;
  EXPECT_EQ(mrc_region_rail_info(r, 0, &info), ENOENT);
  EXPECT_EQ(mrc_region_rail_info(r, 5, &info), ENOENT);
  EXPECT_EQ(mrc_region_rail_info(r, -1, &info), EINVAL);
  EXPECT_EQ(mrc_region_rail_info(r, 64, &info), EINVAL);
  EXPECT_EQ(mrc_region_rail_info(r, 1, nullptr), EINVAL);
  EXPECT_EQ(mrc_region_rail_info(nullptr, 1, &info), EINVAL);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  mrc_rail_stats_t s;
  EXPECT_EQ(mrc_rail_stats(cache_, kRails, &s), ENOENT);
  EXPECT_EQ(mrc_rail_stats(cache_, -1, &s), ENOENT);
  EXPECT_EQ(mrc_rail_stats(nullptr, 0, &s), EINVAL);
}

TEST_F(Rails, AOneRailCacheTakesOnlyRailZero) {
  mrc_cache_t* plain = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg_, pds_[0], &plain), 0);
  EXPECT_EQ(mrc_cache_rails(plain), 1);
  mrc_region_t* r = nullptr;
  EXPECT_EQ(mrc_get_rails(plain, Buffer(0), page_, kAccess, 1u << 1, &r), EINVAL);
  ASSERT_EQ(mrc_get_rails(plain, Buffer(0), page_, kAccess, 1, &r), 0);
  mrc_region_info_t info, rail0;
  mrc_region_info(r, &info);
  ASSERT_EQ(mrc_region_rail_info(r, 0, &rail0), 0);
  EXPECT_EQ(info.lkey, rail0.lkey);
  EXPECT_EQ(mrc_region_rail_info(r, 1, &rail0), ENOENT);
  ASSERT_EQ(mrc_put(plain, r), 0);
  mrc_rail_stats_t s;
  ASSERT_EQ(mrc_rail_stats(plain, 0, &s), 0);
  EXPECT_EQ(s.registrations, 1u);
  mrc_cache_destroy(plain);
}

TEST_F(Rails, ConcurrentGetsAddEachRailOfARegionOnce) {
  // Every region cached first (on rail 0), so that the threads below only
  // add rails to regions they hit, never race on a miss.
  for (int b = 0; b < 32; ++b) {
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get_rails(cache_, Buffer(b), page_, kAccess, 1, &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &failures] {
      for (int i = 0; i < 2000; ++i) {
        const int b = i % 32;
        mrc_region_t* r = nullptr;
        if (mrc_get_rails(cache_, Buffer(b), page_, kAccess, uint64_t{1} << ((t + i) % kRails),
                          &r) != 0 ||
            mrc_put(cache_, r) != 0) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int rail = 0; rail < kRails; ++rail) {
    EXPECT_EQ(RailStats(rail).registrations, 32u) << "rail " << rail;
  }
}

TEST_F(Rails, TheCxxApiGetsOnRailsToo) {
  mrcache::Config config;
  config.bridge_bytes = 0;
  auto cache = mrcache::Cache::CreateRails(config, pds_, kRails);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ((*cache)->rail_count(), kRails);
  {
    auto ref = (*cache)->GetRails(Buffer(1), page_, kAccess, (1u << 0) | (1u << 2));
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto rail2 = mrcache::GetRegionRailInfo(ref->get(), 2);
    ASSERT_TRUE(rail2.ok()) << rail2.status();
    EXPECT_NE(rail2->lkey, 0u);
    EXPECT_EQ(mrcache::GetRegionRailInfo(ref->get(), 1).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(ref->info().lkey, mrcache::GetRegionRailInfo(ref->get(), 0)->lkey);
  }
  EXPECT_FALSE((*cache)->GetRails(Buffer(1), page_, kAccess, 0).ok());
  auto s = (*cache)->rail_stats(2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->registrations, 1u);
}

// Custom rails callbacks: what each rail registered, by handle.
struct RailLedger {
  std::mutex mu;
  std::map<std::pair<int, uint64_t>, void*> live;
  uint64_t next = 1;
  int registered[kRails] = {};
  int deregistered[kRails] = {};
};

int LedgerReg(void* ctx, int rail, void* addr, size_t, int, uint64_t* handle, uint32_t* lkey,
              uint32_t* rkey) {
  auto* l = static_cast<RailLedger*>(ctx);
  std::lock_guard<std::mutex> lock(l->mu);
  *handle = l->next++;
  *lkey = static_cast<uint32_t>(rail * 1000 + *handle);
  *rkey = *lkey + 1;
  l->live[{rail, *handle}] = addr;
  l->registered[rail]++;
  return 0;
}

int LedgerDereg(void* ctx, int rail, uint64_t handle) {
  auto* l = static_cast<RailLedger*>(ctx);
  std::lock_guard<std::mutex> lock(l->mu);
  if (l->live.erase({rail, handle}) != 1) return EINVAL;
  l->deregistered[rail]++;
  return 0;
}

TEST_F(Rails, CustomRailCallbacksAreCalledWithTheRail) {
  RailLedger ledger;
  const mrc_rail_registrar_ops_t ops = {LedgerReg, LedgerDereg};
  mrc_config_t* cfg = nullptr;
  ASSERT_EQ(mrc_config_create(&cfg), 0);
  ASSERT_EQ(mrc_config_set(cfg, "custom_pins", "0"), 0);
  mrc_cache_t* custom = nullptr;
  EXPECT_EQ(mrc_cache_create_custom_rails(cfg, &ops, &ledger, 0, &custom), EINVAL);
  EXPECT_EQ(mrc_cache_create_custom_rails(cfg, &ops, &ledger, 65, &custom), EINVAL);
  EXPECT_EQ(mrc_cache_create_custom_rails(cfg, nullptr, &ledger, 3, &custom), EINVAL);
  ASSERT_EQ(mrc_cache_create_custom_rails(cfg, &ops, &ledger, 3, &custom), 0);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get_rails(custom, Buffer(0), page_, kAccess, 0b101, &r), 0);
  mrc_region_info_t info;
  ASSERT_EQ(mrc_region_rail_info(r, 2, &info), 0);
  EXPECT_EQ(info.lkey / 1000, 2u);
  EXPECT_EQ(mrc_region_rail_info(r, 1, &info), ENOENT);
  ASSERT_EQ(mrc_put(custom, r), 0);
  EXPECT_EQ(mrc_get_rails(custom, Buffer(0), page_, kAccess, 0b1000, &r), EINVAL);
  EXPECT_EQ(ledger.registered[0], 1);
  EXPECT_EQ(ledger.registered[1], 0);
  EXPECT_EQ(ledger.registered[2], 1);
  mrc_cache_destroy(custom);
  mrc_config_destroy(cfg);
  EXPECT_TRUE(ledger.live.empty());
  for (int rail = 0; rail < 3; ++rail) {
    EXPECT_EQ(ledger.registered[rail], ledger.deregistered[rail]) << "rail " << rail;
  }
}

}  // namespace
