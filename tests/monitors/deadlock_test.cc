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
  // Maps `len` fresh bytes and touches them; nullptr (and a failure) if
  // mmap fails.
  static char* MapTouched(size_t len) {
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      ADD_FAILURE() << "mmap: " << strerror(errno);
      return nullptr;
    }
    memset(p, 1, len);
    return static_cast<char*>(p);
  }
  NoisyRegistrar registrar_;
  mrc_cache_t* cache_ = nullptr;
};

TEST_P(DeadlockTest, RegistrarThatAllocatesAndUnmapsDoesNotDeadlock) {
  for (int i = 0; i < 200; ++i) {
    char* p = MapTouched(64 << 10);
    ASSERT_NE(p, nullptr);
    mrc_region_t* region = nullptr;
    ASSERT_EQ(mrc_get(cache_, p, 64 << 10, 1, &region), 0);
    ASSERT_EQ(mrc_put(cache_, region), 0);
    ASSERT_EQ(munmap(p, 64 << 10), 0);  // invalidates; the next get deregisters (Dereg too)
  }
}

TEST_P(DeadlockTest, HookFiringInsideGetSlowPathForACachedRangeDoesNotDeadlock) {
  for (int i = 0; i < 100; ++i) {
    char* cached = MapTouched(16 << 10);
    ASSERT_NE(cached, nullptr);
    mrc_region_t* region = nullptr;
    ASSERT_EQ(mrc_get(cache_, cached, 16 << 10, 1, &region), 0);
    ASSERT_EQ(mrc_put(cache_, region), 0);
    // The next miss's registrar call unmaps `cached` on the same thread.
    registrar_.victim_len = 16 << 10;
    registrar_.victim.store(cached);
    char* other = MapTouched(16 << 10);
    ASSERT_NE(other, nullptr);
    ASSERT_EQ(mrc_get(cache_, other, 16 << 10, 1, &region), 0);
    ASSERT_EQ(mrc_put(cache_, region), 0);
    char* left = registrar_.victim.exchange(nullptr);
    if (left != nullptr) {
      ASSERT_EQ(munmap(left, 16 << 10), 0);
    }
    ASSERT_EQ(munmap(other, 16 << 10), 0);
  }
  // Drain by one more get, then the unmaps done inside Reg must have retired regions.
  char* last = MapTouched(4096);
  ASSERT_NE(last, nullptr);
  mrc_region_t* region = nullptr;
  ASSERT_EQ(mrc_get(cache_, last, 4096, 1, &region), 0);
  ASSERT_EQ(mrc_put(cache_, region), 0);
  mrc_stats_t stats;
  ASSERT_EQ(mrc_stats(cache_, &stats), 0);
  EXPECT_GE(stats.invalidations, 100u);
  ASSERT_EQ(munmap(last, 4096), 0);
}

TEST_P(DeadlockTest, ConcurrentUnmapsWhileOtherThreadsGetDoNotDeadlock) {
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread unmapper([&stop, &failures] {
    while (!stop.load()) {
      char* p = MapTouched(8192);
      if (p == nullptr || munmap(p, 8192) != 0) ++failures;
    }
  });
  // Each getter releases only its own memory, after its put: no get may fail
  // (not even EAGAIN, which needs the requested pages released meanwhile).
  std::vector<std::thread> getters;
  for (int t = 0; t < 2; ++t) {
    getters.emplace_back([this, &failures] {
      for (int i = 0; i < 300; ++i) {
        char* p = MapTouched(32 << 10);
        if (p == nullptr) {
          ++failures;
          continue;
        }
        mrc_region_t* region = nullptr;
        const int rc = mrc_get(cache_, p, 32 << 10, 1, &region);
        if (rc != 0) {
          ++failures;
          ADD_FAILURE() << "mrc_get: " << mrc_strerror(rc);
        } else if (mrc_put(cache_, region) != 0) {
          ++failures;
        }
        if (munmap(p, 32 << 10) != 0) ++failures;
      }
    });
  }
  for (auto& g : getters) g.join();
  stop.store(true);
  unmapper.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Monitors, DeadlockTest,
                         ::testing::Values("symbols", "patch", "symbols+uffd", "auto"));

}  // namespace
