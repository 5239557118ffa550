// The pool on the io_uring registrar: the kernel really pins each chunk, and a
// device-side write (IORING_OP_READ_FIXED into the chunk's fixed buffer) at a
// buffer's offset lands exactly where the CPU sees the buffer.
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/pool.h"
#include "allocator/private_jemalloc.h"
#include "gtest/gtest.h"
#include "mrcache/config.h"
#include "mrcache/registrars/uring_registrar.h"

namespace mrcache {
namespace {

class PoolUringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UringAvailable()) GTEST_SKIP() << "io_uring fixed buffers are unavailable here";
    auto registrar = MakeUringRegistrar(Config());
    ASSERT_TRUE(registrar.ok()) << registrar.status();
    registrar_ = std::move(*registrar);
  }
  void TearDown() override {
    if (registrar_ == nullptr) return;
    absl::optional<UringRegistrarStats> stats = GetUringRegistrarStats(*registrar_);
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->registrations, stats->deregistrations);
    EXPECT_EQ(stats->live, 0u);
  }
  std::unique_ptr<Registrar> registrar_;
};

TEST_F(PoolUringTest, DeviceWritesThroughTheKeysLandInEveryByteOfEveryBuffer) {
  Config config;
  config.pool_chunk_bytes = size_t{2} << 20;
  auto pool = Pool::Create(*registrar_, config);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::vector<size_t> sizes = {1, 64, 100, 4096, 5000, 65536, 200000, size_t{3} << 20};
  unsigned char fill = 1;
  // The buffers of a round live together and are freed at its end: about
  // 5 MiB pinned at most, within Debian's default RLIMIT_MEMLOCK (8 MiB).
  for (int round = 0; round < 4; ++round) {
    std::vector<std::pair<void*, size_t>> buffers;
    for (size_t size : sizes) {
      RegionInfo keys;
      absl::StatusOr<void*> p = (*pool)->Alloc(size, &keys);
      ASSERT_TRUE(p.ok()) << p.status();
      absl::StatusOr<Registration> reg = (*pool)->ChunkRegistration(*p);
      ASSERT_TRUE(reg.ok()) << reg.status();
      EXPECT_EQ(keys.lkey, reg->lkey);
      EXPECT_EQ(keys.rkey, reg->rkey);
      std::memset(*p, 0, size);
      std::vector<unsigned char> pattern(size);
      for (size_t i = 0; i < size; ++i) pattern[i] = static_cast<unsigned char>(fill + i * 7);
      const size_t offset = static_cast<char*>(*p) - static_cast<char*>(reg->addr);
      absl::Status written = registrar_->DeviceWrite(*reg, offset, pattern.data(), size);
      ASSERT_TRUE(written.ok()) << written;
      ASSERT_EQ(std::memcmp(*p, pattern.data(), size), 0)
          << "device write of " << size << " bytes did not land in the buffer";
      buffers.emplace_back(*p, size);
      ++fill;
    }
    for (auto [p, size] : buffers) {
      EXPECT_TRUE((*pool)->Free(p).ok());
    }
  }
}

TEST_F(PoolUringTest, ForcedPurgeNeverSwapsPagesUnderARegistration) {
  // If jemalloc could MADV_DONTNEED a freed extent, the CPU would get fresh
  // pages there while the registration kept the old ones, and a device write
  // into a reused buffer would land where nobody looks.
  auto pool = Pool::Create(*registrar_, Config());
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<void*> freed;
  for (int i = 0; i < 8; ++i) freed.push_back(*(*pool)->Alloc(size_t{256} << 10));
  for (void* p : freed) {
    ASSERT_TRUE((*pool)->Free(p).ok());
  }
  (*pool)->allocated_buffers();  // returns this thread's cached buffers to the arena
  const std::string purge = absl::StrCat("arena.", (*pool)->arena_index(), ".purge");
  ASSERT_EQ(mrcache_je_mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0), 0);
  for (int i = 0; i < 8; ++i) {
    const size_t size = size_t{256} << 10;
    void* p = *(*pool)->Alloc(size);
    absl::StatusOr<Registration> reg = (*pool)->ChunkRegistration(p);
    ASSERT_TRUE(reg.ok()) << reg.status();
    std::vector<unsigned char> pattern(size, static_cast<unsigned char>(0x40 + i));
    const size_t offset = static_cast<char*>(p) - static_cast<char*>(reg->addr);
    ASSERT_TRUE(registrar_->DeviceWrite(*reg, offset, pattern.data(), size).ok());
    EXPECT_EQ(std::memcmp(p, pattern.data(), size), 0) << "buffer " << i;
    ASSERT_TRUE((*pool)->Free(p).ok());
  }
}

TEST_F(PoolUringTest, RoundsOfBuffersStayWithinTheDefaultPinBudget) {
  // 100 buffers of 20,000 B (2 MiB live) allocated and freed 2,000 times:
  // freed buffers are reused, so the pinned chunks stay within Debian's
  // default RLIMIT_MEMLOCK (8 MiB) and an unprivileged process never gets
  // ENOMEM from the kernel.
  constexpr size_t kBudget = size_t{8} << 20;
  auto pool = Pool::Create(*registrar_, Config());
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<void*> buffers(100);
  for (int round = 0; round < 2000; ++round) {
    for (void*& p : buffers) {
      absl::StatusOr<void*> got = (*pool)->Alloc(20000);
      ASSERT_TRUE(got.ok()) << "round " << round << ": " << got.status();
      p = *got;
    }
    ASSERT_LE((*pool)->stats().registered_bytes, kBudget) << "round " << round;
    for (void* p : buffers) {
      ASSERT_TRUE((*pool)->Free(p).ok());
    }
  }
}

}  // namespace
}  // namespace mrcache
