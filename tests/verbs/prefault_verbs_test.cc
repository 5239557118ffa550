// Prefaulting (mrcache/registrars/prefault.h) on the verbs registrar over
// softverbs, which pins for real: a cache's first get of an untouched buffer
// is one registration whose device writes land in the pages the CPU sees, and
// ODP registrations are never prefaulted.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "mrcache/cache.h"
#include "mrcache/registrars/prefault.h"
#include "tests/softverbs/fixture.h"

namespace mrcache {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// Under the 8 MiB RLIMIT_MEMLOCK of unprivileged runs.
constexpr size_t kBytes = 6 * kMiB;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

size_t ResidentPages(const char* addr, size_t length) {
  std::vector<unsigned char> vec((length + kPage - 1) / kPage);
  if (mincore(const_cast<char*>(addr), length, vec.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

class PrefaultVerbsTest : public softverbs::SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    if (HasFatalFailure()) return;
    buf_ = static_cast<char*>(MapPages(kBytes));
    ASSERT_NE(buf_, nullptr);
    config_.registrar = "verbs";
    config_.monitor = "none";
    config_.stats_shm = false;
    config_.prefault_bytes = kMiB;
    config_.prefault_threads = 3;
  }
  void TearDown() override {
    if (buf_ != nullptr) munmap(buf_, kBytes);
    SoftverbsTest::TearDown();
  }
  Config config_;
  char* buf_ = nullptr;
};

class PrefaultOdpVerbsTest : public PrefaultVerbsTest {
  const char* odp() const override { return "explicit"; }
};

TEST_F(PrefaultVerbsTest, FirstGetIsOneRegistrationThatDeviceWritesReach) {
  std::memset(buf_ + 4 * kMiB, 'b', kPage);  // touched before; the rest is not
  auto cache = Cache::Create(config_, pd_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  {
    auto ref = (*cache)->Get(buf_, kBytes, kAccessLocalWrite);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_EQ(GetPrefaultStats((*cache)->registrar())->prefaults, 1u);
    EXPECT_EQ(GetPrefaultStats((*cache)->registrar())->fallbacks, 0u);
    const RegionInfo info = ref->info();
    ASSERT_LE(info.addr, static_cast<void*>(buf_));
    ASSERT_GE(static_cast<char*>(info.addr) + info.length, buf_ + kBytes);
    EXPECT_EQ(client_.Counters().live_mrs, before_.live_mrs + 1);
    EXPECT_EQ(std::string(buf_ + 4 * kMiB, kPage), std::string(kPage, 'b'))
        << "data written before the registration";
    const size_t base = static_cast<size_t>(buf_ - static_cast<char*>(info.addr));
    for (size_t offset : {size_t{0}, 2 * kMiB + 100, 4 * kMiB, kBytes - kPage}) {
      const std::string data(kPage, static_cast<char>('0' + offset % 10));
      ASSERT_TRUE((*cache)->DeviceWrite(ref->get(), base + offset, data.data(), data.size()).ok());
      EXPECT_EQ(std::memcmp(buf_ + offset, data.data(), data.size()), 0) << offset;
    }
  }
  EXPECT_EQ((*cache)->stats().registrations, 1u);
  cache->reset();
}

TEST_F(PrefaultOdpVerbsTest, OnDemandRegionsAreNeverPrefaulted) {
  config_.odp = OdpMode::kExplicit;
  auto cache = Cache::Create(config_, pd_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  {
    auto ref = (*cache)->Get(buf_, kBytes, kAccessLocalWrite);
    ASSERT_TRUE(ref.ok()) << ref.status();
    EXPECT_TRUE(ref->info().access & kAccessOnDemand);
  }
  EXPECT_EQ(GetPrefaultStats((*cache)->registrar())->prefaults, 0u);
  EXPECT_EQ(ResidentPages(buf_, kBytes), 0u);
  cache->reset();
}

}  // namespace
}  // namespace mrcache
