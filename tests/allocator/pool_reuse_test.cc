// The pool reuses freed buffers of every size and releases what it does not
// need: for every jemalloc size class from 64 B to 4 MiB, and one size above
// the chunk size, under each alloc/free pattern, the pool never fails below
// pool_max_bytes and its registered bytes stay within the bound below.
//
// The bound, checked after every round (or every N operations):
//
//   registered <= peak live footprint + pool_retain_bytes
//                 + threads x (two chunks + what a thread may cache)
//
// - peak live footprint: the most bytes the test held at once, each buffer
//   counted as jemalloc lays it out (its size class; a large class, above
//   14 KiB, also takes one more page: jemalloc's cache-oblivious offset).
//   A buffer that is live keeps its chunk registered, so nothing smaller can
//   hold; the peak, not the current count, because a non-moving allocator
//   keeps a chunk while any one of its buffers lives.
// - pool_retain_bytes: empty chunks the pool keeps on purpose.
// - two chunks per thread: the chunk being filled (a partly used slab or
//   extent run), and the chunk of the one buffer above 64 KiB the thread's
//   magazine may keep.
// - what a thread may cache of one class: jemalloc's tcache holds at most
//   20 large buffers or 2 slabs' worth of a small class (at least 20 buffers),
//   and the pool's magazine at most 128 KiB or one buffer; that is within
//   21 buffers + 256 KiB.
// A chunk leak grows past this bound within a few rounds: before the fix,
// 100 buffers of 16 KiB mapped 10 new chunks (20 MiB) a round.
//
// At the end, once every buffer is freed and the pool trimmed (the calling
// thread's caches flushed; other threads have exited, which flushes theirs),
// registered <= pool_retain_bytes: the pool follows the live bytes, not its
// history. Registrations == deregistrations after the pool is destroyed.
//
// Rounds: CI runs the counts below; POOL_REUSE_ROUNDS=10000 (with
// --test_env) runs every round-based pattern 10,000 rounds, and
// POOL_REUSE_SOAK_OPS the soak's operations (20,000 in CI).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/pool.h"
#include "allocator/private_jemalloc.h"
#include "gtest/gtest.h"
#include "tests/allocator/counting_registrar.h"

namespace mrcache {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = kKiB * kKiB;
constexpr size_t kChunk = 2 * kMiB;
constexpr size_t kRetain = 2 * kMiB;
constexpr size_t kPage = 4096;

size_t ReadSize(const std::string& name) {
  size_t v = 0;
  size_t len = sizeof v;
  EXPECT_EQ(mrcache_je_mallctl(name.c_str(), &v, &len, nullptr, 0), 0) << name;
  return v;
}
unsigned ReadUnsigned(const char* name) {
  unsigned v = 0;
  size_t len = sizeof v;
  EXPECT_EQ(mrcache_je_mallctl(name, &v, &len, nullptr, 0), 0) << name;
  return v;
}

// jemalloc's size classes from 64 B to 4 MiB, then chunk + 64 B.
std::vector<size_t> SizeClasses() {
  std::vector<size_t> sizes;
  const unsigned bins = ReadUnsigned("arenas.nbins");
  for (unsigned i = 0; i < bins; ++i)
    sizes.push_back(ReadSize(absl::StrCat("arenas.bin.", i, ".size")));
  const unsigned large = ReadUnsigned("arenas.nlextents");
  for (unsigned i = 0; i < large; ++i) {
    const size_t size = ReadSize(absl::StrCat("arenas.lextent.", i, ".size"));
    if (size > 4 * kMiB) break;
    sizes.push_back(size);
  }
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [](size_t s) { return s < 64; }),
              sizes.end());
  sizes.push_back(kChunk + 64);
  return sizes;
}

size_t LargestSmallClass() {
  return ReadSize(absl::StrCat("arenas.bin.", ReadUnsigned("arenas.nbins") - 1, ".size"));
}

// Bytes of the pool one live buffer of `size` accounts for (see the bound).
size_t Footprint(size_t size) {
  const size_t usize = mrcache_je_nallocx((size + 63) & ~size_t{63}, 0);
  return usize > LargestSmallClass() ? usize + kPage : usize;
}

// Buffers a pattern keeps live for a class: a few chunks' worth, 4 to 256.
size_t CountFor(size_t size) { return std::clamp<size_t>(6 * kMiB / size, 4, 256); }

int RoundsFromEnvironment(int ci_rounds) {
  const char* v = std::getenv("POOL_REUSE_ROUNDS");
  return v != nullptr ? std::atoi(v) : ci_rounds;
}

class PoolReuseTest : public ::testing::Test {
 public:
  void SetUp() override {
    config_.pool_chunk_bytes = kChunk;
    config_.pool_retain_bytes = kRetain;
    config_.pool_max_bytes = 1024 * kMiB;
    auto pool = Pool::Create(registrar_, config_);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
  }
  void TearDown() override {
    if (pool_ != nullptr) {
      // Everything freed: the pool holds no more than the chunks it keeps.
      pool_->Trim();
      EXPECT_EQ(pool_->allocated_buffers(), 0u);
      EXPECT_LE(pool_->stats().registered_bytes, kRetain);
      EXPECT_EQ(pool_->stats().registered_bytes, pool_->stats().retained_bytes);
    }
    pool_.reset();
    EXPECT_EQ(registrar_.registrations(), registrar_.deregistrations());
    EXPECT_EQ(registrar_.live(), 0u);
    EXPECT_EQ(registrar_.bad_deregistrations(), 0u);
  }

  void* Alloc(size_t size) {
    absl::StatusOr<void*> p = pool_->Alloc(size);
    EXPECT_TRUE(p.ok()) << "alloc of " << size << " bytes with " << pool_->stats().registered_bytes
                        << " registered: " << p.status();
    return p.ok() ? *p : nullptr;
  }
  void Free(void* p) { ASSERT_TRUE(pool_->Free(p).ok()); }

  // The bound at the top of this file, for buffers of `size` (or, with
  // several sizes, the sum of the per-class allowances).
  size_t Bound(size_t peak_live, const std::vector<size_t>& sizes, int threads) const {
    size_t allowance = 0;
    for (size_t size : sizes) allowance += 2 * kChunk + 21 * Footprint(size) + 256 * kKiB;
    return peak_live + kRetain + threads * allowance;
  }
  void ExpectWithinBound(size_t peak_live, const std::vector<size_t>& sizes, int threads,
                         const std::string& where) {
    const size_t registered = pool_->stats().registered_bytes;
    EXPECT_LE(registered, Bound(peak_live, sizes, threads))
        << where << ": " << registered << " bytes registered, peak live " << peak_live;
  }

  // After a class's pattern, every buffer freed: once the calling thread's
  // caches are flushed, only the chunks the pool keeps on purpose remain, and
  // the next class starts from there.
  void ExpectOnlyRetainedChunksAfter(size_t size) {
    pool_->Trim();
    EXPECT_LE(pool_->stats().registered_bytes, kRetain) << size << " B, all freed";
  }

  CountingRegistrar registrar_;
  Config config_;
  std::unique_ptr<Pool> pool_;
};

// Rounds of n allocations, then n frees in allocation order (or reversed).
void RunRounds(PoolReuseTest* test, size_t size, size_t n, int rounds, bool lifo) {
  std::vector<void*> buffers(n);
  const size_t peak = n * Footprint(size);
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      buffers[i] = test->Alloc(size);
      ASSERT_NE(buffers[i], nullptr) << "round " << round << ", buffer " << i;
    }
    if (lifo) std::reverse(buffers.begin(), buffers.end());
    for (void* p : buffers) test->Free(p);
    test->ExpectWithinBound(peak, {size}, 1, absl::StrCat(size, " B, round ", round));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, RoundsOfNThenFreeAllReuseEverySizeClass) {
  for (size_t size : SizeClasses()) {
    RunRounds(this, size, CountFor(size), RoundsFromEnvironment(20), /*lifo=*/false);
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, LifoRoundsReuseEverySizeClass) {
  for (size_t size : SizeClasses()) {
    RunRounds(this, size, CountFor(size), RoundsFromEnvironment(20), /*lifo=*/true);
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, FifoQueueReusesEverySizeClass) {
  const int rounds = RoundsFromEnvironment(20);
  for (size_t size : SizeClasses()) {
    const size_t n = CountFor(size);
    std::deque<void*> queue;
    for (size_t i = 0; i < n; ++i) queue.push_back(Alloc(size));
    for (int round = 0; round < rounds && !HasFailure(); ++round) {
      for (size_t i = 0; i < n; ++i) {
        Free(queue.front());
        queue.pop_front();
        queue.push_back(Alloc(size));
        ASSERT_NE(queue.back(), nullptr) << size << " B, round " << round;
      }
      ExpectWithinBound(n * Footprint(size), {size}, 1, absl::StrCat(size, " B, round ", round));
    }
    for (void* p : queue) Free(p);
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, RandomInterleavingReusesEverySizeClass) {
  std::mt19937_64 rng(38);
  const int rounds = RoundsFromEnvironment(20);
  for (size_t size : SizeClasses()) {
    const size_t n = CountFor(size);
    std::vector<void*> live;
    size_t peak = 0;
    for (int round = 0; round < rounds && !HasFailure(); ++round) {
      for (size_t op = 0; op < 2 * n; ++op) {
        // Allocate with probability 1/2, always below 1 live, never past 2n.
        if (live.empty() || (live.size() < 2 * n && rng() % 2 == 0)) {
          live.push_back(Alloc(size));
          ASSERT_NE(live.back(), nullptr) << size << " B, round " << round;
          peak = std::max(peak, live.size());
        } else {
          const size_t i = rng() % live.size();
          Free(live[i]);
          live[i] = live.back();
          live.pop_back();
        }
      }
      ExpectWithinBound(peak * Footprint(size), {size}, 1, absl::StrCat(size, " B, round ", round));
    }
    for (void* p : live) Free(p);
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

// Allocates n buffers of `size`, checks that each is at least that large
// (jemalloc's usable size) and that they own disjoint bytes, and frees them.
void AllocCheckFree(PoolReuseTest* test, size_t size, size_t n) {
  std::vector<unsigned char*> buffers;
  for (size_t i = 0; i < n; ++i) {
    auto* p = static_cast<unsigned char*>(test->Alloc(size));
    ASSERT_NE(p, nullptr);
    ASSERT_GE(mrcache_je_sallocx(p, 0), size) << "a smaller buffer for " << size << " B";
    std::memset(p, static_cast<int>(i + 1), size);
    buffers.push_back(p);
  }
  for (size_t i = 0; i < n; ++i) {
    const unsigned char want = static_cast<unsigned char>(i + 1);
    ASSERT_EQ(buffers[i][0], want) << size << " B buffer " << i << " was overwritten";
    ASSERT_EQ(buffers[i][size - 1], want) << size << " B buffer " << i << " was overwritten";
  }
  std::sort(buffers.begin(), buffers.end());
  for (size_t i = 1; i < n; ++i) {
    ASSERT_LE(buffers[i - 1] + size, buffers[i]) << size << " B buffers overlap";
  }
  for (unsigned char* p : buffers) test->Free(p);
}

TEST_F(PoolReuseTest, PagesReusedByAnotherSizeClassServeOnlyThatClass) {
  // The pages of a larger class's buffers go back to the pool (trimmed), a
  // smaller class gets them and frees its buffers into the thread's cache;
  // the larger class's next buffers must still be its own size. Classes up
  // to 128 KiB: the per-thread caches sort buffers by class up to 64 KiB.
  std::vector<size_t> sizes = SizeClasses();
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [](size_t s) { return s > 128 * kKiB; }),
              sizes.end());
  for (size_t i = 1; i < sizes.size(); ++i) {
    const size_t big = sizes[i], small = sizes[i - 1];
    const size_t n = std::min<size_t>(CountFor(big), 64);
    AllocCheckFree(this, big, n);
    pool_->Trim();
    AllocCheckFree(this, small, std::min<size_t>(CountFor(small), 64));
    AllocCheckFree(this, big, n);
    pool_->Trim();
    if (HasFailure()) return;
  }
}

// A bounded hand-off from one thread to another.
class Handoff {
 public:
  explicit Handoff(size_t capacity) : capacity_(capacity) {}
  void Push(void* p) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() < capacity_; });
    queue_.push_back(p);
    cv_.notify_all();
  }
  void* Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    void* p = queue_.front();
    queue_.pop_front();
    cv_.notify_all();
    return p;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<void*> queue_;
  const size_t capacity_;
};

TEST_F(PoolReuseTest, OneThreadAllocatesAnotherFreesEverySizeClass) {
  const int rounds = RoundsFromEnvironment(10);
  for (size_t size : SizeClasses()) {
    const size_t n = CountFor(size);
    Handoff handoff(n);
    std::atomic<bool> failed{false};
    std::thread consumer([&] {
      for (size_t i = 0; i < n * rounds; ++i) {
        void* p = handoff.Pop();
        if (p == nullptr || !pool_->Free(p).ok()) failed = true;
      }
    });
    for (size_t i = 0; i < n * rounds; ++i) {
      absl::StatusOr<void*> p = pool_->Alloc(size);
      if (!p.ok()) {
        ADD_FAILURE() << size << " B: " << p.status();
        failed = true;
      }
      handoff.Push(p.ok() ? *p : nullptr);
    }
    consumer.join();
    EXPECT_FALSE(failed) << size << " B";
    // Live: at most n in the hand-off plus one in each thread's hands.
    ExpectWithinBound((n + 2) * Footprint(size), {size}, 2, absl::StrCat(size, " B"));
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, TwoThreadsEachRunRoundsOfEverySizeClass) {
  const int rounds = RoundsFromEnvironment(10);
  for (size_t size : SizeClasses()) {
    const size_t n = CountFor(size);
    std::atomic<int> failures{0};
    std::atomic<size_t> worst{0};
    auto run = [&] {
      std::vector<void*> buffers(n);
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < n; ++i) {
          absl::StatusOr<void*> p = pool_->Alloc(size);
          if (!p.ok()) {
            ++failures;
            buffers[i] = nullptr;
          } else {
            buffers[i] = *p;
          }
        }
        for (void* p : buffers) {
          if (p != nullptr && !pool_->Free(p).ok()) ++failures;
        }
        const size_t registered = pool_->stats().registered_bytes;
        size_t seen = worst.load();
        while (registered > seen && !worst.compare_exchange_weak(seen, registered)) {
        }
      }
    };
    std::thread a(run), b(run);
    a.join();
    b.join();
    EXPECT_EQ(failures.load(), 0) << size << " B";
    EXPECT_LE(worst.load(), Bound(2 * n * Footprint(size), {size}, 2)) << size << " B";
    ExpectOnlyRetainedChunksAfter(size);
    if (HasFailure()) return;
  }
}

TEST_F(PoolReuseTest, SoakOfMixedSizesAndPatternsStaysBounded) {
  // Sizes the issue's users hit plus the extremes, freed at random with a
  // bounded live set; the bound sums the per-class allowances.
  const std::vector<size_t> sizes = {64,        4 * kKiB,   14 * kKiB, 16 * kKiB,  20000,
                                     64 * kKiB, 256 * kKiB, kMiB,      kChunk + 64};
  std::mt19937_64 rng(3800);
  const char* env_ops = std::getenv("POOL_REUSE_SOAK_OPS");
  const size_t ops = env_ops != nullptr ? std::strtoull(env_ops, nullptr, 10) : 20000;
  std::vector<std::pair<void*, size_t>> live;
  size_t live_bytes = 0, peak = 0;
  for (size_t op = 0; op < ops && !HasFailure(); ++op) {
    if (live.empty() || (live_bytes < 32 * kMiB && rng() % 2 == 0)) {
      const size_t size = sizes[rng() % sizes.size()];
      void* p = Alloc(size);
      ASSERT_NE(p, nullptr) << "op " << op;
      live.emplace_back(p, size);
      live_bytes += Footprint(size);
      peak = std::max(peak, live_bytes);
    } else {
      const size_t i = rng() % live.size();
      Free(live[i].first);
      live_bytes -= Footprint(live[i].second);
      live[i] = live.back();
      live.pop_back();
    }
    if (op % 1000 == 999) ExpectWithinBound(peak, sizes, 1, absl::StrCat("op ", op));
  }
  for (const auto& [p, size] : live) Free(p);
}

// The rows of the report that found the leak, each for 200 rounds in CI
// (POOL_REUSE_ROUNDS=10000 for the full check).
struct Row {
  size_t n;
  size_t size;
};
class IssueRowsTest : public PoolReuseTest, public ::testing::WithParamInterface<Row> {};

TEST_P(IssueRowsTest, RoundsOfNThenFreeAllNeverGrow) {
  RunRounds(this, GetParam().size, GetParam().n, RoundsFromEnvironment(200), /*lifo=*/false);
}

INSTANTIATE_TEST_SUITE_P(Rows, IssueRowsTest,
                         ::testing::Values(Row{1000, 4 * kKiB}, Row{1000, 16 * kKiB},
                                           Row{100, 16 * kKiB}, Row{100, 20000}),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return absl::StrCat(info.param.n, "x", info.param.size);
                         });

}  // namespace
}  // namespace mrcache
