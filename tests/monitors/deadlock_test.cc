// Deadlock-freedom: memory events fired from inside the cache's own
// registrar calls, and on a thread inside mrc_get's slow path, never wait on
// the cache. Each test is bounded by alarm(): a deadlock kills the test.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/mrcache.h"

namespace {

constexpr unsigned kTimeoutSeconds = 60;

// A registrar that behaves like rdma-core inside ibv_reg_mr/ibv_dereg_mr:
// it allocates, frees, madvise(MADV_DONTFORK)s the range and unmaps memory.
// Optionally it also unmaps a victim that the same cache has registered, so
// a hook fires for a cached range on the thread inside the registrar call.
struct NoisyRegistrar {
  std::atomic<uint64_t> next{1};
  std::atomic<uint64_t> live{0};
  std::atomic<char*> victim{nullptr};
  size_t victim_len = 0;

  static void Noise(void* addr, size_t length) {
    void* big = malloc(1 << 20);  // above the mmap threshold: free() unmaps it
    memset(big, 1, 4096);
    free(big);
    void* small = malloc(64);
    free(small);
    uintptr_t page = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{4095};
    madvise(reinterpret_cast<void*>(page), length + (reinterpret_cast<uintptr_t>(addr) - page),
            MADV_DONTFORK);
    void* scratch = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(scratch, 8192);
  }

  static int Reg(void* ctx, void* addr, size_t length, int access, uint64_t* handle, uint32_t* lkey,
                 uint32_t* rkey) {
    auto* self = static_cast<NoisyRegistrar*>(ctx);
    Noise(addr, length);
    if (char* v = self->victim.exchange(nullptr)) munmap(v, self->victim_len);
    *handle = self->next.fetch_add(1);
    *lkey = *rkey = static_cast<uint32_t>(*handle);
    self->live.fetch_add(1);
    return 0;
  }
  static int Dereg(void* ctx, uint64_t handle) {
    auto* self = static_cast<NoisyRegistrar*>(ctx);
    Noise(&handle, sizeof(handle));
    self->live.fetch_sub(1);
    return 0;
  }
};

class DeadlockTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    alarm(kTimeoutSeconds);
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", GetParam().c_str()), 0);
    mrc_registrar_ops_t ops = {&NoisyRegistrar::Reg, &NoisyRegistrar::Dereg};
    int rc = mrc_cache_create_custom(cfg, &ops, &registrar_, &cache_);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) GTEST_SKIP() << GetParam() << " is not available in this build";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }
  void TearDown() override {
    if (cache_ != nullptr) mrc_cache_destroy(cache_);
    EXPECT_EQ(registrar_.live.load(), 0u) << "registrations made != deregistrations";
    alarm(0);
  }
  static char* MapTouched(size_t len) {
    char* p = static_cast<char*>(
        mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    memset(p, 1, len);
    return p;
  }
  NoisyRegistrar registrar_;
  mrc_cache_t* cache_ = nullptr;
};

TEST_P(DeadlockTest, RegistrarThatAllocatesAndUnmapsDoesNotDeadlock) {
  for (int i = 0; i < 200; ++i) {
    char* p = MapTouched(64 << 10);
    mrc_region_t* region = nullptr;
    ASSERT_EQ(mrc_get(cache_, p, 64 << 10, 1, &region), 0);
    mrc_put(cache_, region);
    munmap(p, 64 << 10);  // invalidates; the next get deregisters (Dereg is noisy too)
  }
}

TEST_P(DeadlockTest, HookFiringInsideGetSlowPathForACachedRangeDoesNotDeadlock) {
  for (int i = 0; i < 100; ++i) {
    char* cached = MapTouched(16 << 10);
    mrc_region_t* region = nullptr;
    ASSERT_EQ(mrc_get(cache_, cached, 16 << 10, 1, &region), 0);
    mrc_put(cache_, region);
    // The next miss's registrar call unmaps `cached` on the same thread.
    registrar_.victim_len = 16 << 10;
    registrar_.victim.store(cached);
    char* other = MapTouched(16 << 10);
    ASSERT_EQ(mrc_get(cache_, other, 16 << 10, 1, &region), 0);
    mrc_put(cache_, region);
    char* left = registrar_.victim.exchange(nullptr);
    if (left != nullptr) munmap(left, 16 << 10);
    munmap(other, 16 << 10);
  }
  // Drain by one more get, then the unmaps done inside Reg must have retired regions.
  char* last = MapTouched(4096);
  mrc_region_t* region = nullptr;
  ASSERT_EQ(mrc_get(cache_, last, 4096, 1, &region), 0);
  mrc_put(cache_, region);
  mrc_stats_t stats;
  mrc_stats(cache_, &stats);
  EXPECT_GE(stats.invalidations, 100u);
  munmap(last, 4096);
}

TEST_P(DeadlockTest, ConcurrentUnmapsWhileOtherThreadsGetDoNotDeadlock) {
  std::atomic<bool> stop{false};
  std::thread unmapper([&stop] {
    while (!stop.load()) {
      char* p = MapTouched(8192);
      munmap(p, 8192);
    }
  });
  std::vector<std::thread> getters;
  for (int t = 0; t < 2; ++t) {
    getters.emplace_back([this] {
      for (int i = 0; i < 300; ++i) {
        char* p = MapTouched(32 << 10);
        mrc_region_t* region = nullptr;
        if (mrc_get(cache_, p, 32 << 10, 1, &region) == 0) mrc_put(cache_, region);
        munmap(p, 32 << 10);
      }
    });
  }
  for (auto& g : getters) g.join();
  stop.store(true);
  unmapper.join();
}

INSTANTIATE_TEST_SUITE_P(Monitors, DeadlockTest,
                         ::testing::Values("symbols", "patch", "uffd", "auto"));

}  // namespace
