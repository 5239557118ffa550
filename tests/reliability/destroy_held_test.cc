// destroy_held_test.cc: mrc_cache_destroy while regions are still held.
//
// Defined behaviour (mrcache.h): destroy deregisters everything the cache
// registered, including regions still held, and warns once on stderr naming
// how many regions were held. Here the holders are several threads, through
// the C API:
//  - threads that exited before the destroy (their per-thread state is
//    orphaned and folded into the cache), and
//  - threads still alive at the destroy, which exit afterwards (their
//    thread-local state must outlive the cache without touching it).
// Checked: no crash (ASan/TSan run this suite), the warning names the exact
// count, and the custom registrar saw as many deregistrations as
// registrations by the time destroy returned.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct Ledger {
  std::atomic<int> regs{0}, deregs{0};
};

int LedgerReg(void* ctx, void* addr, size_t, int, uint64_t* handle, uint32_t* lkey,
              uint32_t* rkey) {
  auto* l = static_cast<Ledger*>(ctx);
  *handle = static_cast<uint64_t>(++l->regs);
  *lkey = *rkey = static_cast<uint32_t>(*handle);
  return 0;
}

int LedgerDereg(void* ctx, uint64_t) {
  ++static_cast<Ledger*>(ctx)->deregs;
  return 0;
}

class DestroyHeldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    buf_ = static_cast<char*>(
        mmap(nullptr, 256 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf_, MAP_FAILED);
    mrc_config_t* cfg;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", "none"), 0);
    mrc_registrar_ops_t ops{LedgerReg, LedgerDereg};
    ASSERT_EQ(mrc_cache_create_custom(cfg, &ops, &ledger_, &cache_), 0);
    mrc_config_destroy(cfg);
  }
  void TearDown() override { munmap(buf_, 256 * kPage); }

  // Thread t holds `per_thread` distinct regions (non-overlapping: no merges),
  // plus one region it got and put (unused at destroy, not counted as held).
  void GetRegions(int t, int per_thread) {
    for (int i = 0; i < per_thread; ++i) {
      mrc_region_t* r;
      ASSERT_EQ(mrc_get(cache_, buf_ + (t * 16 + i * 2) * kPage, kPage, 1, &r), 0);
      if (i % 2 == 1) {  // a second reference to the same region
        mrc_region_t* again;
        ASSERT_EQ(mrc_get(cache_, buf_ + (t * 16 + i * 2) * kPage, 100, 1, &again), 0);
        ASSERT_EQ(again, r);
      }
    }
    mrc_region_t* unused;
    ASSERT_EQ(mrc_get(cache_, buf_ + (t * 16 + 14) * kPage, kPage, 1, &unused), 0);
    ASSERT_EQ(mrc_put(cache_, unused), 0);
  }

  std::string DestroyCapturingStderr() {
    ::testing::internal::CaptureStderr();
    mrc_cache_destroy(cache_);
    cache_ = nullptr;
    return ::testing::internal::GetCapturedStderr();
  }

  char* buf_ = nullptr;
  Ledger ledger_;
  mrc_cache_t* cache_ = nullptr;
};

TEST_F(DestroyHeldTest, RegionsHeldByExitedThreadsAreReleasedWithAWarningNamingTheCount) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([this, t] { GetRegions(t, 3); });
  for (auto& th : threads) th.join();
  ASSERT_EQ(ledger_.regs.load(), 16);
  std::string err = DestroyCapturingStderr();
  EXPECT_NE(err.find("12 region(s) are still held"), std::string::npos) << err;
  EXPECT_EQ(ledger_.deregs.load(), ledger_.regs.load()) << "every registration released";
}

TEST_F(DestroyHeldTest, RegionsHeldByLiveThreadsAreReleasedAndTheThreadsExitSafely) {
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  bool destroyed = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      GetRegions(t, 4);
      std::unique_lock<std::mutex> lock(mu);
      ++ready;
      cv.notify_all();
      cv.wait(lock, [&] { return destroyed; });
      // Exits now: thread-local state of a destroyed cache is released.
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return ready == 3; });
  }
  std::string err = DestroyCapturingStderr();
  EXPECT_NE(err.find("12 region(s) are still held"), std::string::npos) << err;
  EXPECT_EQ(ledger_.deregs.load(), ledger_.regs.load());
  {
    std::lock_guard<std::mutex> lock(mu);
    destroyed = true;
  }
  cv.notify_all();
  for (auto& th : threads) th.join();
  EXPECT_EQ(ledger_.deregs.load(), ledger_.regs.load()) << "nothing deregistered twice";
}

TEST_F(DestroyHeldTest, NoWarningWhenNothingIsHeld) {
  mrc_region_t* r;
  ASSERT_EQ(mrc_get(cache_, buf_, kPage, 1, &r), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  std::string err = DestroyCapturingStderr();
  EXPECT_EQ(err.find("still held"), std::string::npos) << err;
  EXPECT_EQ(ledger_.deregs.load(), 1);
}

}  // namespace
