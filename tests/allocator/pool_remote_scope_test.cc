// What a pool buffer's rkey reaches, on softverbs (the stand-in libibverbs
// that checks a peer's RDMA WRITE against the MR as an HCA does). The pool
// registers whole chunks, so mrcache.h documents the scope: with a remote
// right in pool_access, a buffer's rkey reaches every byte of its chunk,
// [p rounded down to pool_chunk_bytes, end reported by mrc_pool_keys(p)),
// and nothing else. These tests show that statement is exactly true: a write
// through one buffer's rkey lands in a neighbouring buffer, reaches both ends
// of the chunk, and is refused one byte outside it; without remote rights
// (the default) it is refused everywhere.
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "mrcache/mrcache.h"
#include "tests/softverbs/fixture.h"

namespace {

constexpr size_t kChunk = size_t{2} << 20;
constexpr size_t kBuffer = 64 * 1024;

class PoolRemoteScopeTest : public softverbs::SoftverbsTest {
 protected:
  // A cache on the fixture's PD and a pool with `access` (empty: default).
  void MakePool(const char* access) {
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "pool_chunk_bytes", "2M"), 0);
    if (access[0] != '\0') {
      ASSERT_EQ(mrc_config_set(cfg_, "pool_access", access), 0);
    }
    ASSERT_EQ(mrc_cache_create(cfg_, pd_, &cache_), 0);
    ASSERT_EQ(mrc_pool_create(cache_, cfg_, &pool_), 0);
  }
  void TearDown() override {
    mrc_pool_destroy(pool_);
    mrc_cache_destroy(cache_);
    mrc_config_destroy(cfg_);
    softverbs::SoftverbsTest::TearDown();
  }
  int Write(uint32_t rkey, uintptr_t at, size_t len, unsigned char fill) {
    std::vector<unsigned char> src(len, fill);
    return client_.remote_write(rkey, at, src.data(), len);
  }
  // Two buffers of one chunk, the second's keys, and the chunk's bounds.
  void TwoBuffersOfOneChunk() {
    a_ = static_cast<unsigned char*>(mrc_pool_alloc(pool_, kBuffer, &keys_a_));
    b_ = static_cast<unsigned char*>(mrc_pool_alloc(pool_, kBuffer, nullptr));
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    std::memset(a_, 0, kBuffer);
    std::memset(b_, 0, kBuffer);
    mrc_region_info_t chunk_a, chunk_b;
    ASSERT_EQ(mrc_pool_keys(pool_, a_, &chunk_a), 0);
    ASSERT_EQ(mrc_pool_keys(pool_, b_, &chunk_b), 0);
    chunk_start_ = reinterpret_cast<uintptr_t>(a_) & ~(kChunk - 1);
    chunk_end_ = reinterpret_cast<uintptr_t>(chunk_a.addr) + chunk_a.length;
    ASSERT_EQ(chunk_end_, reinterpret_cast<uintptr_t>(chunk_b.addr) + chunk_b.length)
        << "the two buffers are not in one chunk";
    ASSERT_EQ(chunk_b.rkey, keys_a_.rkey);
  }

  mrc_config_t* cfg_ = nullptr;
  mrc_cache_t* cache_ = nullptr;
  mrc_pool_t* pool_ = nullptr;
  unsigned char* a_ = nullptr;
  unsigned char* b_ = nullptr;
  mrc_region_info_t keys_a_{};
  uintptr_t chunk_start_ = 0, chunk_end_ = 0;
};

TEST_F(PoolRemoteScopeTest, DefaultPoolAccessIsLocalWriteAndTheRkeyReachesNothing) {
  MakePool("");
  TwoBuffersOfOneChunk();
  if (HasFatalFailure()) return;
  EXPECT_EQ(keys_a_.access, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(Write(keys_a_.rkey, reinterpret_cast<uintptr_t>(a_), 64, 0x11), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(a_[0], 0);
  mrc_pool_free(pool_, a_);
  mrc_pool_free(pool_, b_);
}

TEST_F(PoolRemoteScopeTest, RemoteWriteThroughOneBuffersRkeyLandsInANeighbourOfItsChunk) {
  MakePool("local_write+remote_write");
  TwoBuffersOfOneChunk();
  if (HasFatalFailure()) return;
  EXPECT_EQ(keys_a_.access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(Write(keys_a_.rkey, reinterpret_cast<uintptr_t>(b_), kBuffer, 0x5b), IBV_WC_SUCCESS);
  EXPECT_EQ(b_[0], 0x5b) << "the documented scope says the neighbour is reachable";
  EXPECT_EQ(b_[kBuffer - 1], 0x5b);
  mrc_pool_free(pool_, a_);
  mrc_pool_free(pool_, b_);
}

TEST_F(PoolRemoteScopeTest, RemoteWriteReachesExactlyTheDocumentedChunk) {
  MakePool("local_write+remote_write");
  TwoBuffersOfOneChunk();
  if (HasFatalFailure()) return;
  EXPECT_EQ(chunk_end_ - chunk_start_, kChunk);
  // Both ends of the chunk are inside the scope (the chunk's bytes that no
  // buffer holds are the pool's own memory: writing them is harmless here).
  EXPECT_EQ(Write(keys_a_.rkey, chunk_start_, 1, 0x22), IBV_WC_SUCCESS);
  EXPECT_EQ(Write(keys_a_.rkey, chunk_end_ - 1, 1, 0x22), IBV_WC_SUCCESS);
  // One byte outside either end is not.
  EXPECT_EQ(Write(keys_a_.rkey, chunk_start_ - 1, 1, 0x33), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Write(keys_a_.rkey, chunk_end_, 1, 0x33), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Write(keys_a_.rkey, chunk_end_ - 1, 2, 0x33), IBV_WC_REM_ACCESS_ERR);
  mrc_pool_free(pool_, a_);
  mrc_pool_free(pool_, b_);
}

TEST_F(PoolRemoteScopeTest, PoolAccessWithoutLocalWriteIsEinval) {
  ASSERT_EQ(mrc_config_create(&cfg_), 0);
  EXPECT_EQ(mrc_config_set(cfg_, "pool_access", "remote_write"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "pool_access", "local_write+bogus"), EINVAL);
  EXPECT_EQ(mrc_config_set(cfg_, "pool_access", "local_write+remote_read"), 0);
}

}  // namespace
