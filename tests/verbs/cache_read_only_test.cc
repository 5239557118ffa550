// cache_read_only_test.cc: the cache over read-only memory (the verbs
// registrar on softverbs, which pins MRs without a write right the way the
// kernel does). REMOTE_READ on PROT_READ pages registers and a peer reads
// the bytes; a write right there fails EFAULT. A region never spans memory
// whose protection refuses its rights: a read-only request beside writable
// regions, and a writable request beside read-only ones, both succeed with
// regions that hold only pages their rights allow (a merge that would add a
// write right over read-only pages falls back to the requested range).
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "tests/softverbs/fixture.h"

namespace mrcache {
namespace {

constexpr size_t kPart = 64 << 10;
constexpr int kRead = kAccessRemoteRead;
constexpr int kWriteRead = kAccessLocalWrite | kAccessRemoteRead;

// Three parts of one area: writable, read-only, writable; each part's bytes
// are distinct.
class CacheReadOnly : public softverbs::SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    if (HasFatalFailure()) return;
    area_ = static_cast<char*>(MapPages(3 * kPart));
    ASSERT_NE(area_, nullptr);
    for (size_t i = 0; i < 3 * kPart; ++i) area_[i] = static_cast<char>(i * 7 + i / kPart);
    ASSERT_EQ(mprotect(read_only(), kPart, PROT_READ), 0);
    Config config;
    config.registrar = "verbs";
    auto made = Cache::Create(config, pd_);
    ASSERT_TRUE(made.ok()) << made.status();
    cache_ = std::move(*made);
  }

  void TearDown() override {
    cache_.reset();  // deregisters everything before the fixture counts
    if (area_ != nullptr) munmap(area_, 3 * kPart);
    SoftverbsTest::TearDown();
  }

  char* writable() const { return area_; }
  char* read_only() const { return area_ + kPart; }

  // A peer's RDMA read of `length` bytes at `at` through `region`'s rkey
  // returns exactly the bytes there.
  void ExpectPeerReads(const RegionRef& region, const char* at, size_t length) {
    std::vector<char> out(length);
    ASSERT_EQ(client_.remote_read(region.info().rkey, reinterpret_cast<uintptr_t>(at), out.data(),
                                  length),
              IBV_WC_SUCCESS);
    EXPECT_EQ(memcmp(out.data(), at, length), 0);
  }

  // The region lies within [from, to).
  static void ExpectWithin(const RegionRef& region, const char* from, const char* to) {
    const RegionInfo info = region.info();
    EXPECT_GE(static_cast<char*>(info.addr), from);
    EXPECT_LE(static_cast<char*>(info.addr) + info.length, to);
  }

  char* area_ = nullptr;
  std::unique_ptr<Cache> cache_;
};

TEST_F(CacheReadOnly, RemoteReadOnReadOnlyPagesRegistersAndAPeerReadsTheBytes) {
  auto region = cache_->Get(read_only(), kPart, kRead);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->info().access & kAccessLocalWrite, 0);
  ExpectPeerReads(*region, read_only(), kPart);
}

TEST_F(CacheReadOnly, AWriteRightOnReadOnlyPagesIsEfault) {
  for (int access :
       {static_cast<int>(kAccessLocalWrite), kWriteRead, kWriteRead | kAccessRemoteWrite}) {
    auto region = cache_->Get(read_only(), kPart, access);
    ASSERT_FALSE(region.ok()) << "access " << access;
    EXPECT_EQ(StatusToErrno(region.status()), EFAULT) << region.status();
  }
}

TEST_F(CacheReadOnly, ARemoteReadRequestBesideAWritableRegionSucceeds) {
  // Their union would take the writable region's LOCAL_WRITE over read-only
  // pages.
  ASSERT_TRUE(cache_->Get(writable(), kPart, kWriteRead).ok());
  auto region = cache_->Get(writable() + kPart / 2, kPart, kRead);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->info().access & kAccessLocalWrite, 0);
  ExpectPeerReads(*region, writable() + kPart / 2, kPart);
  EXPECT_EQ(cache_->stats().registrar_failures, 0u);
}

TEST_F(CacheReadOnly, ALocalReadRequestBesideAWritableRegionSucceeds) {
  ASSERT_TRUE(cache_->Get(writable(), kPart, kAccessLocalWrite).ok());
  auto region = cache_->Get(writable() + kPart / 2, kPart, 0);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->info().access & kAccessLocalWrite, 0);
  EXPECT_EQ(cache_->stats().registrar_failures, 0u);
}

TEST_F(CacheReadOnly, AWritableRequestBesideAReadOnlyRegionSucceeds) {
  // A read-only region over writable and read-only pages; the union with it
  // would need LOCAL_WRITE over the read-only ones.
  ASSERT_TRUE(cache_->Get(writable() + kPart / 2, kPart, kRead).ok());
  auto region = cache_->Get(writable(), kPart * 3 / 4, kWriteRead);
  ASSERT_TRUE(region.ok()) << region.status();
  ExpectWithin(*region, writable(), writable() + kPart);
  const char data[] = "written by the device";
  EXPECT_TRUE(cache_->DeviceWrite(region->get(), 100, data, sizeof data).ok());
  EXPECT_STREQ(writable() + 100, data);
  EXPECT_EQ(cache_->stats().registrar_failures, 0u);
}

TEST_F(CacheReadOnly, AWritableRequestBesideReadOnlyPagesSucceeds) {
  for (char* at : {read_only() - kPart / 2, read_only() + kPart}) {
    auto region = cache_->Get(at, kPart / 2, kAccessLocalWrite);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_TRUE(static_cast<char*>(region->info().addr) + region->info().length <= read_only() ||
                static_cast<char*>(region->info().addr) >= read_only() + kPart)
        << "the region reaches read-only pages";
  }
  EXPECT_EQ(cache_->stats().registrar_failures, 0u);
}

}  // namespace
}  // namespace mrcache
