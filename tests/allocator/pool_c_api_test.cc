// mrc_pool_* (mrcache.h): a pool on a cache whose registrar is the caller's
// own callbacks, which count and remember registrations.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "gtest/gtest.h"
#include "mrcache/mrcache.h"

namespace {

struct Registrations {
  std::mutex mu;
  std::map<uint64_t, std::pair<uintptr_t, size_t>> live;  // handle -> range
  uint64_t next = 0, registered = 0, deregistered = 0;
};

int Reg(void* ctx, void* addr, size_t length, int, uint64_t* handle, uint32_t* lkey,
        uint32_t* rkey) {
  auto* r = static_cast<Registrations*>(ctx);
  std::lock_guard<std::mutex> lock(r->mu);
  *handle = ++r->next;
  *lkey = *rkey = static_cast<uint32_t>(*handle);
  r->live[*handle] = {reinterpret_cast<uintptr_t>(addr), length};
  ++r->registered;
  return 0;
}

int Dereg(void* ctx, uint64_t handle) {
  auto* r = static_cast<Registrations*>(ctx);
  std::lock_guard<std::mutex> lock(r->mu);
  if (r->live.erase(handle) == 0) return EINVAL;
  ++r->deregistered;
  return 0;
}

class PoolCApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "monitor", "none"), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "pool_chunk_bytes", "2M"), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "pool_max_bytes", "8M"), 0);
    mrc_registrar_ops_t ops = {Reg, Dereg};
    ASSERT_EQ(mrc_cache_create_custom(cfg_, &ops, &regs_, &cache_), 0);
    ASSERT_EQ(mrc_pool_create(cache_, cfg_, &pool_), 0);
  }
  void TearDown() override {
    mrc_pool_destroy(pool_);
    mrc_cache_destroy(cache_);
    mrc_config_destroy(cfg_);
    EXPECT_EQ(regs_.registered, regs_.deregistered);
    EXPECT_TRUE(regs_.live.empty());
  }
  // The keys name a live registration that covers [p, p + size).
  bool Covered(void* p, size_t size, const mrc_region_info_t& keys) {
    std::lock_guard<std::mutex> lock(regs_.mu);
    auto it = regs_.live.find(keys.lkey);
    if (it == regs_.live.end() || keys.addr != p || keys.length != size) return false;
    auto addr = reinterpret_cast<uintptr_t>(p);
    return it->second.first <= addr && addr + size <= it->second.first + it->second.second;
  }

  Registrations regs_;
  mrc_config_t* cfg_ = nullptr;
  mrc_cache_t* cache_ = nullptr;
  mrc_pool_t* pool_ = nullptr;
};

TEST_F(PoolCApiTest, AllocReturnsKeysThatCoverTheBuffer) {
  for (size_t size : {size_t{1}, size_t{64}, size_t{4096}, size_t{65536}, size_t{3} << 20}) {
    mrc_region_info_t keys;
    void* p = mrc_pool_alloc(pool_, size, &keys);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_TRUE(Covered(p, size, keys)) << size;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    mrc_region_info_t again;
    ASSERT_EQ(mrc_pool_keys(pool_, p, &again), 0);
    EXPECT_EQ(again.lkey, keys.lkey);
    EXPECT_EQ(again.addr, p);
    EXPECT_GE(again.length, size);
    mrc_pool_free(pool_, p);
  }
}

TEST_F(PoolCApiTest, AllocFailureIsNullWithErrno) {
  errno = 0;
  EXPECT_EQ(mrc_pool_alloc(pool_, 0, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(mrc_pool_alloc(pool_, size_t{9} << 20, nullptr), nullptr);  // beyond pool_max_bytes
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(mrc_pool_alloc(nullptr, 64, nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(PoolCApiTest, KeysOfAForeignPointerIsEinval) {
  void* heap = std::calloc(1, 64);
  mrc_region_info_t keys;
  EXPECT_EQ(mrc_pool_keys(pool_, heap, &keys), EINVAL);
  EXPECT_EQ(mrc_pool_keys(pool_, nullptr, &keys), EINVAL);
  std::free(heap);
}

TEST_F(PoolCApiTest, FreeOfAForeignPointerPrintsAnErrorAndFreesNothing) {
  void* heap = std::calloc(1, 64);
  ::testing::internal::CaptureStderr();
  mrc_pool_free(pool_, heap);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("mrc_pool_free"), std::string::npos) << err;
  EXPECT_NE(err.find("not a buffer of this pool"), std::string::npos) << err;
  std::free(heap);  // still the application's block
}

TEST_F(PoolCApiTest, DestroyReportsLiveBuffersAndDeregistersEverything) {
  ASSERT_NE(mrc_pool_alloc(pool_, 100, nullptr), nullptr);
  ASSERT_NE(mrc_pool_alloc(pool_, 100000, nullptr), nullptr);
  ::testing::internal::CaptureStderr();
  mrc_pool_destroy(pool_);
  pool_ = nullptr;
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("2 buffer(s) still allocated"), std::string::npos) << err;
  std::lock_guard<std::mutex> lock(regs_.mu);
  EXPECT_EQ(regs_.registered, regs_.deregistered);
}

TEST(PoolCApi, CreateWithoutACacheIsEinval) {
  mrc_pool_t* pool = nullptr;
  EXPECT_EQ(mrc_pool_create(nullptr, nullptr, &pool), EINVAL);
  EXPECT_EQ(pool, nullptr);
}

}  // namespace
