// byte_eviction_stress_test.cc: evictions for bytes (the size order of
// README "Pinned-memory budget") while several threads get, hold and put
// overlapping ranges, invalidate and flush, and the registrar refuses now
// and then with ENOMEM (which makes the cache evict for bytes, in size
// order from then on). Every put, invalidation and flush succeeds; a get
// fails only with ENOMEM, and only as often as refusals were injected (each
// failed get consumed at least one); EAGAIN cannot happen (it needs the
// requested pages themselves spoiled 16 times in a row); at teardown every
// registration was deregistered. Under ASan
// and TSan (tagged "sanitize") this also checks the size lists' memory and
// locking.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/counting_registrar.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kPages = 512;
constexpr int kThreads = 4;
constexpr int kOpsPerThread = 4000;
constexpr size_t kHeldAtMost = 6;

struct Limits {
  size_t max_merge_bytes;
  size_t max_bytes;
  size_t max_regions;
  int register_delay_us;
};

struct Outcome {
  int unexpected_errors = 0;  // failed puts, invalidations, flushes; gets other than ENOMEM
  int gets = 0, enomem = 0;   // gets tried; gets that failed with ENOMEM
  int refusals = 0;           // registrations the registrar was made to refuse
  int registrations = 0, deregistrations = 0;
  uint64_t evictions = 0;
};

// One thread's mix: 3% arm a refusal of the next 1-2 registrations, 2%
// invalidate up to 8 pages, 1% flush, 34% put a held region, else get 1-4
// pages (a quarter of the time up to 64) at a random offset, some with
// remote read rights.
struct ChurnCounts {
  std::atomic<int> unexpected{0}, gets{0}, enomem{0};
};

void Churn(Cache* cache, RegistrarCounters* counters, char* buf, uint64_t seed,
           ChurnCounts* counts) {
  std::mt19937_64 rng(seed);
  std::vector<Region*> held;
  auto expect_ok = [counts](const absl::Status& status) {
    if (!status.ok()) {
      counts->unexpected.fetch_add(1);
      ADD_FAILURE() << status;
    }
  };
  auto put_one = [&](size_t k) {
    expect_ok(cache->Put(held[k]));
    held[k] = held.back();
    held.pop_back();
  };
  for (int i = 0; i < kOpsPerThread; ++i) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 3) {
      counters->fail_count.store(1 + static_cast<int>(rng() % 2));
    } else if (op < 5) {
      const size_t page = rng() % kPages;
      const size_t n = std::min<size_t>(1 + rng() % 8, kPages - page);
      expect_ok(cache->Invalidate(buf + page * kPage, n * kPage));
    } else if (op < 6) {
      expect_ok(cache->Flush());
    } else if (op < 40 && !held.empty()) {
      put_one(rng() % held.size());
    } else {
      const size_t page = rng() % kPages;
      const size_t want = 1 + (rng() % 4 == 0 ? rng() % 64 : rng() % 4);
      const size_t n = std::min(want, kPages - page);
      const size_t offset = rng() % 100;
      const int access = kAccessLocalWrite | (rng() % 8 == 0 ? kAccessRemoteRead : 0);
      auto r = cache->Acquire(buf + page * kPage + offset, n * kPage - offset, access);
      counts->gets.fetch_add(1);
      if (!r.ok()) {
        if (StatusToErrno(r.status()) == ENOMEM) {
          counts->enomem.fetch_add(1);
        } else {
          counts->unexpected.fetch_add(1);
          ADD_FAILURE() << r.status();
        }
        continue;
      }
      held.push_back(*r);
      if (held.size() > kHeldAtMost) put_one(0);
    }
  }
  while (!held.empty()) put_one(held.size() - 1);
}

Outcome RunStress(const Limits& limits, uint64_t seed) {
  Outcome out;
  auto counters = std::make_shared<RegistrarCounters>();
  counters->fail_errno = ENOMEM;
  counters->register_delay_us = limits.register_delay_us;
  Config config;
  config.registrar = "sim";
  config.sim_base_ns = 0;
  config.sim_page_ns = 0;
  config.monitor = "none";
  config.max_merge_bytes = limits.max_merge_bytes;
  config.max_bytes = limits.max_bytes;
  config.max_regions = limits.max_regions;
  char* buf = static_cast<char*>(
      mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (buf == MAP_FAILED) {
    ADD_FAILURE() << "mmap: " << std::strerror(errno);
    return out;
  }
  std::memset(buf, 1, kPages * kPage);
  {
    auto made = Cache::Create(
        config, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config), counters));
    if (!made.ok()) {
      ADD_FAILURE() << made.status();
      munmap(buf, kPages * kPage);
      return out;
    }
    ChurnCounts counts;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back(Churn, made->get(), counters.get(), buf, seed * 17 + t, &counts);
    }
    for (std::thread& t : threads) t.join();
    out.unexpected_errors = counts.unexpected.load();
    out.gets = counts.gets.load();
    out.enomem = counts.enomem.load();
    out.refusals = counters->faults_injected.load();
    out.evictions = (*made)->stats().evictions;
  }
  out.registrations = counters->registrations.load();
  out.deregistrations = counters->deregistrations.load();
  munmap(buf, kPages * kPage);
  return out;
}

void ExpectClean(const Outcome& o) {
  EXPECT_EQ(o.unexpected_errors, 0) << "an operation failed, or a get other than with ENOMEM";
  EXPECT_LE(o.enomem, o.refusals) << "a get failed with ENOMEM that no injected refusal caused";
  // About 60% of the operations are gets; a 3% arm refuses 1-2 registrations.
  EXPECT_GE(o.gets - o.enomem, kThreads * kOpsPerThread / 2) << "too few gets succeeded";
  EXPECT_GT(o.registrations, 0);
  EXPECT_EQ(o.registrations, o.deregistrations) << "registrations leaked";
  EXPECT_GT(o.evictions, 0u) << "the scenario evicted nothing";
}

TEST(ByteEvictionStressTest, MergingWithoutLimitsLeaksNothing) {
  ExpectClean(RunStress({size_t{1} << 30, 0, 0, 0}, 1));
}

TEST(ByteEvictionStressTest, MergingUnderMaxBytesLeaksNothing) {
  ExpectClean(RunStress({size_t{1} << 30, 64 * kPage, 0, 0}, 2));
}

TEST(ByteEvictionStressTest, MergingUnderMaxRegionsLeaksNothing) {
  ExpectClean(RunStress({size_t{1} << 30, 0, 16, 0}, 3));
}

TEST(ByteEvictionStressTest, WithoutMergingUnderBothLimitsLeaksNothing) {
  ExpectClean(RunStress({0, 48 * kPage, 24, 0}, 4));
}

TEST(ByteEvictionStressTest, ASlowRegistrarLeaksNothing) {
  ExpectClean(RunStress({size_t{1} << 30, 96 * kPage, 0, 20}, 5));
}

}  // namespace
}  // namespace mrcache
