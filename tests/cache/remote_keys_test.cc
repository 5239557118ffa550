// remote_keys_test.cc: what an rkey handed out through the C API reaches
// (config key remote_keys). shared: a region with remote rights covers only
// the pages requested with those rights, even where bridging widens
// local-only requests over a whole resident block; private: each request
// with a remote right gets its own registration of exactly its bytes,
// deregistered at put. Runs on the uring registrar (real pinning), with a
// monitor that reports every release (bridging needs one). Every test ends
// with registrations == deregistrations.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/registrars/low_memlock.h"

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kBlock = 128 * kMiB;  // bridge_bytes' default
// Two requests of a bridging test are 512 KiB apart, in one 1 MiB-aligned
// block: under the pin budget of Debian's default RLIMIT_MEMLOCK (8 MiB) the
// cache bridges within 1 MiB blocks (a quarter of the budget, README
// "Pinned-memory budget"), without a budget within 128 MiB, so the tests
// hold unprivileged as well as with CAP_IPC_LOCK.
constexpr size_t kGap = 512 * 1024;
constexpr int kLocalWrite = 1, kRemoteWrite = 2, kRemoteRead = 4;
constexpr int kRemote = kLocalWrite | kRemoteWrite;

class RemoteKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mrcache::UringAvailable()) GTEST_SKIP() << "io_uring unavailable";
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "registrar", "uring"), 0);
    // One mapping holding a whole 128 MiB-aligned block; only its first
    // 40 MiB are made resident (bridging pins resident memory only).
    raw_ = static_cast<char*>(mmap(nullptr, 2 * kBlock, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ASSERT_NE(raw_, MAP_FAILED);
    block_ =
        reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw_) + kBlock - 1) & ~(kBlock - 1));
    std::memset(block_, 1, 40 * kMiB);
  }

  void TearDown() override {
    if (cache_ != nullptr) {
      ASSERT_EQ(mrc_flush(cache_), 0);
      mrc_stats_t s;
      mrc_stats(cache_, &s);
      EXPECT_EQ(s.regions, 0u);
      EXPECT_EQ(s.registrations, s.deregistrations);
      mrc_cache_destroy(cache_);
    }
    if (cfg_ != nullptr) mrc_config_destroy(cfg_);
    if (raw_ != nullptr && raw_ != MAP_FAILED) munmap(raw_, 2 * kBlock);
  }

  static constexpr const char* kNoCompleteMonitor =
      "neither patch nor symbols+uffd can exist in this build (ENOTSUP)";

  // A cache with remote_keys=`mode` and a monitor that reports every release
  // (patch, else symbols+uffd); false if neither can exist in this build
  // (ENOTSUP). Any other failure to create the cache is a test failure.
  bool Create(const char* mode) {
    EXPECT_EQ(mrc_config_set(cfg_, "remote_keys", mode), 0);
    for (const char* monitor : {"patch", "symbols+uffd"}) {
      EXPECT_EQ(mrc_config_set(cfg_, "monitor", monitor), 0);
      const int rc = mrc_cache_create(cfg_, nullptr, &cache_);
      if (rc == 0) return true;
      if (rc != ENOTSUP) {
        ADD_FAILURE() << "monitor " << monitor << ": " << mrc_strerror(rc);
        return false;
      }
    }
    return false;
  }

  mrc_region_info_t GetPut(char* addr, size_t length, int access) {
    mrc_region_t* r = nullptr;
    mrc_region_info_t info{};
    EXPECT_EQ(mrc_get(cache_, addr, length, access, &r), 0);
    if (r == nullptr) return info;
    mrc_region_info(r, &info);
    EXPECT_EQ(mrc_put(cache_, r), 0);
    return info;
  }

  mrc_stats_t Stats() const {
    mrc_stats_t s;
    mrc_stats(cache_, &s);
    return s;
  }

  mrc_config_t* cfg_ = nullptr;
  mrc_cache_t* cache_ = nullptr;
  char* raw_ = nullptr;
  char* block_ = nullptr;
};

TEST_F(RemoteKeysTest, SharedRemoteRegionCoversOnlyTheRequestedPagesOfAResidentBlock) {
  if (!Create("shared")) GTEST_SKIP() << kNoCompleteMonitor;
  char* a = block_ + 4 * kMiB;
  char* b = a + kGap;  // same block, same mapping
  mrc_region_info_t first = GetPut(a, 4096, kRemote);
  mrc_region_info_t second = GetPut(b, 4096, kRemote);
  EXPECT_EQ(first.addr, a);
  EXPECT_EQ(first.length, kPage);
  EXPECT_EQ(second.addr, b);
  EXPECT_EQ(second.length, kPage) << "the rkey reaches memory no remote request named";
  EXPECT_EQ(Stats().remote_private, 0u);
}

TEST_F(RemoteKeysTest, SharedLocalOnlyRequestsStillBridgeTheResidentBlock) {
  if (!Create("shared")) GTEST_SKIP() << kNoCompleteMonitor;
  char* a = block_ + 4 * kMiB;
  char* b = a + kGap;
  GetPut(a, 4096, kLocalWrite);
  mrc_region_info_t second = GetPut(b, 4096, kLocalWrite);
  char* start = static_cast<char*>(second.addr);
  EXPECT_LE(start, a) << "bridging covers both requests";
  EXPECT_GE(start + second.length, b + 4096);
}

TEST_F(RemoteKeysTest, SharedRemoteRegionIsReusedByLaterRemoteRequests) {
  if (!Create("shared")) GTEST_SKIP() << kNoCompleteMonitor;
  GetPut(block_, 8 * kPage, kRemote);
  GetPut(block_ + kPage, 100, kRemote);
  EXPECT_EQ(Stats().registrations, 1u);
  EXPECT_EQ(Stats().hits, 1u);
}

TEST_F(RemoteKeysTest, PrivateRemoteRequestIsExactDeregisteredAtPutAndCounted) {
  if (!Create("private")) GTEST_SKIP() << kNoCompleteMonitor;
  char* addr = block_ + 4 * kMiB + 100;
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache_, addr, 300, kLocalWrite | kRemoteRead, &r), 0);
  mrc_region_info_t info;
  mrc_region_info(r, &info);
  EXPECT_EQ(info.addr, addr);
  EXPECT_EQ(info.length, 300u);
  mrc_region_t* again = nullptr;
  ASSERT_EQ(mrc_get(cache_, addr, 300, kLocalWrite | kRemoteRead, &again), 0);
  EXPECT_NE(mrc_region_handle(again), mrc_region_handle(r)) << "never shared";
  ASSERT_EQ(mrc_put(cache_, again), 0);
  ASSERT_EQ(mrc_put(cache_, r), 0);
  const mrc_stats_t s = Stats();
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.deregistrations, 2u) << "deregistered at put";
  EXPECT_EQ(s.remote_private, 2u);
}

TEST_F(RemoteKeysTest, PrivateModeStillBridgesLocalOnlyRequests) {
  if (!Create("private")) GTEST_SKIP() << kNoCompleteMonitor;
  GetPut(block_ + 4 * kMiB, 4096, kLocalWrite);
  mrc_region_info_t second = GetPut(block_ + 4 * kMiB + kGap, 4096, kLocalWrite);
  EXPECT_GT(second.length, kGap);
  EXPECT_EQ(Stats().remote_private, 0u);
}

TEST_F(RemoteKeysTest, PrivateRegistrationsGiveTheirPinsBackAtPutWithoutCapIpcLock) {
  // Unprivileged (RLIMIT_MEMLOCK 8 MiB, no CAP_IPC_LOCK): ten 3 MiB private
  // registrations of unaligned ranges, one after the other, each put before
  // the next get; nothing stays pinned in between.
  struct Outcome {
    int err;
    uint64_t pinned_after_put, registrations, deregistrations, remote_private;
  };
  char* area = block_;
  auto result = mrcache_test::RunWithLowMemlock<Outcome>(8 * kMiB, [area]() {
    alarm(60);
    Outcome out{};
    mrc_config_t* cfg = nullptr;
    mrc_cache_t* cache = nullptr;
    out.err = mrc_config_create(&cfg);
    if (out.err == 0) out.err = mrc_config_set(cfg, "registrar", "uring");
    if (out.err == 0) out.err = mrc_config_set(cfg, "remote_keys", "private");
    if (out.err == 0) out.err = mrc_config_set(cfg, "monitor", "none");
    if (out.err == 0) out.err = mrc_cache_create(cfg, nullptr, &cache);
    for (int i = 0; i < 10 && out.err == 0; ++i) {
      mrc_region_t* r = nullptr;
      out.err = mrc_get(cache, area + i * 3 * kMiB + 123, 3 * kMiB, kRemote, &r);
      if (out.err == 0) out.err = mrc_put(cache, r);
      mrc_stats_t s;
      mrc_stats(cache, &s);
      out.pinned_after_put += s.pinned_bytes;
    }
    if (cache != nullptr) {
      mrc_stats_t s;
      mrc_stats(cache, &s);
      out.registrations = s.registrations;
      out.deregistrations = s.deregistrations;
      out.remote_private = s.remote_private;
      mrc_cache_destroy(cache);
    }
    if (cfg != nullptr) mrc_config_destroy(cfg);
    return out;
  });
  ASSERT_TRUE(result.child_ok);
  ASSERT_EQ(result.setup_errno, 0);
  EXPECT_EQ(result.outcome.err, 0) << mrc_strerror(result.outcome.err);
  EXPECT_EQ(result.outcome.pinned_after_put, 0u);
  EXPECT_EQ(result.outcome.registrations, 10u);
  EXPECT_EQ(result.outcome.deregistrations, 10u);
  EXPECT_EQ(result.outcome.remote_private, 10u);
}

class RemoteKeysConfigTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("MRCACHE_REMOTE_KEYS");
    if (cfg_ != nullptr) mrc_config_destroy(cfg_);
  }
  std::string Value() {
    char buf[32] = {};
    EXPECT_EQ(mrc_config_get(cfg_, "remote_keys", buf, sizeof buf), 0);
    return buf;
  }
  mrc_config_t* cfg_ = nullptr;
};

TEST_F(RemoteKeysConfigTest, DefaultIsShared) {
  unsetenv("MRCACHE_REMOTE_KEYS");
  ASSERT_EQ(mrc_config_create(&cfg_), 0);
  EXPECT_EQ(Value(), "shared");
}

TEST_F(RemoteKeysConfigTest, SetAcceptsSharedAndPrivate) {
  ASSERT_EQ(mrc_config_create(&cfg_), 0);
  ASSERT_EQ(mrc_config_set(cfg_, "remote_keys", "private"), 0);
  EXPECT_EQ(Value(), "private");
  ASSERT_EQ(mrc_config_set(cfg_, "remote_keys", "shared"), 0);
  EXPECT_EQ(Value(), "shared");
}

TEST_F(RemoteKeysConfigTest, UnknownValueIsEinvalAndLeavesTheValue) {
  ASSERT_EQ(mrc_config_create(&cfg_), 0);
  EXPECT_EQ(mrc_config_set(cfg_, "remote_keys", "public"), EINVAL);
  EXPECT_EQ(Value(), "shared");
}

TEST_F(RemoteKeysConfigTest, EnvironmentVariableSetsIt) {
  setenv("MRCACHE_REMOTE_KEYS", "private", 1);
  ASSERT_EQ(mrc_config_create(&cfg_), 0);
  EXPECT_EQ(Value(), "private");
}

TEST_F(RemoteKeysConfigTest, BadEnvironmentValueIsEinval) {
  setenv("MRCACHE_REMOTE_KEYS", "sometimes", 1);
  EXPECT_EQ(mrc_config_create(&cfg_), EINVAL);
  cfg_ = nullptr;
}

}  // namespace
