// memlock_test.cc: the cache under a tiny RLIMIT_MEMLOCK (uring registrar).
//
// Each test runs in a child process that drops CAP_IPC_LOCK (root is otherwise
// exempt) and lowers RLIMIT_MEMLOCK to 256 KiB (tests/registrars/low_memlock.h).
// Behaviour:
//  - many distinct buffers that each fit, together far above the limit: every
//    get succeeds, because the registrar's ENOMEM makes the cache evict unused
//    regions and retry; evictions > 0; nothing leaks;
//  - one request larger than the limit cannot fit whatever is evicted: ENOMEM,
//    with a message naming RLIMIT_MEMLOCK;
//  - regions in use are never evicted to make room: holding buffers until one
//    more does not fit ends in ENOMEM, and every held one stays registered.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/registrars/low_memlock.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

constexpr size_t kLimit = 256 << 10;
constexpr size_t kBuffer = 64 << 10;
constexpr int kBuffers = 16;  // 1 MiB in all: four times the limit
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

struct Outcome {
  int setup_errno = 0;  // creating the cache in the child
  int gets_ok = 0;
  int first_errno = 0;  // of the first failing get
  uint64_t evictions = 0;
  int big_errno = 0;
  char big_message[256] = {};
  int held = 0;        // buffers held when one more did not fit
  int held_errno = 0;  // of the get that did not fit
  bool held_still_registered = false;
  int registrations = 0, deregistrations = 0;  // after the cache is destroyed
};

// Buffers of kBuffer bytes with an unmapped page between neighbours.
char* MapBuffers(int n) {
  size_t stride = kBuffer + kPage;
  char* p = static_cast<char*>(
      mmap(nullptr, n * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) return nullptr;
  for (int i = 0; i < n; ++i) munmap(p + i * stride + kBuffer, kPage);
  return p;
}

Outcome RunUnderLimit() {
  Outcome out;
  auto counters = std::make_shared<RegistrarCounters>();
  Config config;
  config.registrar = "uring";
  config.monitor = "none";
  config.max_merge_bytes = 0;
  auto uring = MakeUringRegistrar(config);
  if (!uring.ok()) {
    out.setup_errno = StatusToErrno(uring.status());
    return out;
  }
  {
    auto made =
        Cache::Create(config, std::make_unique<CountingRegistrar>(std::move(*uring), counters));
    if (!made.ok()) {
      out.setup_errno = StatusToErrno(made.status());
      return out;
    }
    Cache& cache = **made;
    char* bufs = MapBuffers(kBuffers);
    const size_t stride = kBuffer + kPage;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < kBuffers; ++i) {
        auto r = cache.Acquire(bufs + i * stride, kBuffer, kAccessLocalWrite);
        if (!r.ok()) {
          if (out.first_errno == 0) out.first_errno = StatusToErrno(r.status());
          continue;
        }
        ++out.gets_ok;
        (void)cache.Put(*r);
      }
    }
    out.evictions = cache.stats().evictions;

    char* big = static_cast<char*>(
        mmap(nullptr, 2 * kLimit, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto r = cache.Acquire(big, 2 * kLimit, kAccessLocalWrite);
    if (r.ok()) {
      (void)cache.Put(*r);
    } else {
      out.big_errno = StatusToErrno(r.status());
      std::snprintf(out.big_message, sizeof out.big_message, "%s",
                    std::string(r.status().message()).c_str());
    }

    // Hold buffers until one no longer fits: the held ones fill the limit.
    Region* held[kBuffers] = {};
    for (int i = 0; i < kBuffers && out.held_errno == 0; ++i) {
      auto h = cache.Acquire(bufs + i * stride, kBuffer, kAccessLocalWrite);
      if (h.ok()) {
        held[out.held++] = *h;
      } else {
        out.held_errno = StatusToErrno(h.status());
      }
    }
    out.held_still_registered = true;
    {
      std::lock_guard<std::mutex> lock(counters->mu);
      for (int i = 0; i < out.held; ++i) {
        if (counters->live.count(GetRegionInfo(held[i]).handle) == 0)
          out.held_still_registered = false;
      }
    }
    for (int i = 0; i < out.held; ++i) (void)cache.Put(held[i]);
    munmap(big, 2 * kLimit);
    munmap(bufs, kBuffers * stride);
  }
  out.registrations = counters->registrations;
  out.deregistrations = counters->deregistrations;
  return out;
}

class MemlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!UringAvailable()) GTEST_SKIP() << "io_uring is not available here";
    result_ = mrcache_test::RunWithLowMemlock<Outcome>(kLimit, RunUnderLimit);
    ASSERT_TRUE(result_.child_ok) << "the child process died";
    ASSERT_EQ(result_.setup_errno, 0)
        << "could not drop CAP_IPC_LOCK or lower the limit: " << std::strerror(result_.setup_errno);
    ASSERT_EQ(result_.outcome.setup_errno, 0) << std::strerror(result_.outcome.setup_errno);
  }
  mrcache_test::ChildResult<Outcome> result_;
};

TEST_F(MemlockTest, BuffersAboveTheLimitInAllAreServedByEvicting) {
  const Outcome& o = result_.outcome;
  EXPECT_EQ(o.gets_ok, 3 * kBuffers) << "first failure: " << std::strerror(o.first_errno);
  EXPECT_GT(o.evictions, 0u);
  std::printf("RELIABILITY memlock limit=%zu buffers=%d gets_ok=%d evictions=%llu\n", kLimit,
              3 * kBuffers, o.gets_ok, static_cast<unsigned long long>(o.evictions));
}

TEST_F(MemlockTest, RequestLargerThanTheLimitIsEnomemNamingTheLimit) {
  const Outcome& o = result_.outcome;
  EXPECT_EQ(o.big_errno, ENOMEM);
  EXPECT_NE(std::strstr(o.big_message, "RLIMIT_MEMLOCK"), nullptr) << o.big_message;
}

TEST_F(MemlockTest, HeldRegionsAreNeverEvictedToMakeRoom) {
  const Outcome& o = result_.outcome;
  EXPECT_EQ(o.held_errno, ENOMEM);
  EXPECT_GE(o.held, 2);
  EXPECT_LE(static_cast<size_t>(o.held) * kBuffer, kLimit);
  EXPECT_TRUE(o.held_still_registered);
}

TEST_F(MemlockTest, NothingLeaksUnderTheLimit) {
  const Outcome& o = result_.outcome;
  EXPECT_GT(o.registrations, 0);
  EXPECT_EQ(o.registrations, o.deregistrations);
}

}  // namespace
}  // namespace mrcache
