// differential_test.cc: the cache against a small, obviously correct model.
//
// A seeded random sequence of operations (get with random ranges and access
// flags, valid and invalid; put; invalidate; flush; unmap + remap of test
// memory, each unmap preceded by an explicit invalidate as a monitor would;
// "limit changes": the sequence runs in phases, each on a cache created with
// different limits, since limits are fixed at creation) is applied to a real
// cache over the sim registrar (zero cost) wrapped in a CountingRegistrar.
// The model knows which pages are mapped, when each page was last
// invalidated as a whole (only whole pages change mapping), which regions the
// test holds, and the bytes requested through each registration. After every operation:
//  - the errno of a get is the model's (EINVAL for bad arguments, EFAULT when
//    a requested page is unmapped, success otherwise);
//  - a returned region covers the request, has exactly the requested remote
//    rights and at least the requested local ones, lies in mapped memory, and
//    was registered after the last whole-page invalidation of every page it
//    covers (no stale region);
//  - a get covered by a held, still-indexed region calls no registrar;
//  - registrations - deregistrations == live registrations == stats.regions,
//    and every region the model holds is still registered;
//  - unused regions respect max_regions / max_bytes (after every miss, and
//    up to the regions put since);
//  - after flush the live registrations are exactly the held ones, after a
//    miss no unused region the new one replaces (merge) is left registered,
//    after an invalidate no unused region is left registered whose used bytes
//    (requested through it, or through the regions it merged) or whole pages
//    the range overlaps.
// At each phase end every reference is put and the cache destroyed:
// registrations == deregistrations. The phases run with async_dereg on but
// the second (off): the checks above that look at the registrar first wait
// for the background deregistrations (stats().dereg_queue_depth 0), except
// after flush, whose contract is that everything is deregistered on return.
//
// Prints: "RELIABILITY differential ops=N seed=S registrations=R stale=0 leaked=0".
// MRCACHE_DIFF_OPS / MRCACHE_DIFF_SEED override the op count and seed.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/queued_deregistrations.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kArenaPages = 64;

uint64_t EnvOr(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

bool Mapped(uintptr_t page_addr) {
  unsigned char vec;
  return mincore(reinterpret_cast<void*>(page_addr), kPage, &vec) == 0;
}

struct Limits {
  size_t max_regions, max_bytes, max_merge_bytes, alignment;
};

// One reference the test holds.
struct Held {
  Region* region;
  uint64_t handle;
  uintptr_t start, end;  // the registered range
  int access;            // what it was registered with
};

class DifferentialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The arena is aligned to 16 pages so that alignment phases stay inside it.
    const size_t align = 16 * kPage;
    size_t span = kArenaPages * kPage + align;
    char* raw = static_cast<char*>(
        mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(raw, MAP_FAILED);
    uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1);
    if (a > reinterpret_cast<uintptr_t>(raw)) munmap(raw, a - reinterpret_cast<uintptr_t>(raw));
    uintptr_t tail = a + kArenaPages * kPage;
    uintptr_t raw_end = reinterpret_cast<uintptr_t>(raw) + span;
    if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
    arena_ = a;
    mapped_.assign(kArenaPages, true);
    invalidated_at_.assign(kArenaPages, 0);
  }

  void TearDown() override {
    for (size_t p = 0; p < kArenaPages; ++p) {
      if (mapped_[p]) munmap(reinterpret_cast<void*>(arena_ + p * kPage), kPage);
    }
  }

  void StartPhase(const Limits& limits, AsyncDereg async_dereg) {
    limits_ = limits;
    Config config;
    config.monitor = "none";
    config.async_dereg = async_dereg;
    config.async_dereg_bytes = 0;  // every batch, however small
    config.sim_base_ns = 0;
    config.sim_page_ns = 0;
    config.max_regions = limits.max_regions;
    config.max_bytes = limits.max_bytes;
    config.max_merge_bytes = limits.max_merge_bytes;
    config.alignment = limits.alignment;
    counters_ = std::make_shared<RegistrarCounters>();
    auto c = Cache::Create(
        config, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config), counters_));
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = std::move(*c);
    puts_since_miss_ = 0;
    bytes_put_since_miss_ = 0;
    retired_.clear();
    used_.clear();
    // Sequence numbers restart with the new registrar.
    invalidated_at_.assign(kArenaPages, 0);
    for (auto& named : remote_named_) named.assign(kArenaPages, false);
  }

  void EndPhase() {
    while (!held_.empty()) PutAt(held_.size() - 1);
    cache_.reset();
    EXPECT_EQ(counters_->registrations.load(), counters_->deregistrations.load());
    EXPECT_TRUE(counters_->live.empty());
    leaked_ += counters_->live.size();
    total_registrations_ += counters_->registrations.load();
  }

  // ---- the model's views ----

  size_t PageOf(uintptr_t addr) const { return (addr - arena_) / kPage; }
  bool InArena(uintptr_t s, uintptr_t e) const {
    return s >= arena_ && e <= arena_ + kArenaPages * kPage;
  }

  // For a get of [s, e): 0 if every page is ours and mapped, EFAULT if one of
  // ours is unmapped, -1 if a page is unknown (outside the arena, or an
  // unmapped page someone else mapped since).
  int ExpectedMapping(uintptr_t s, uintptr_t e) const {
    uintptr_t ps = s & ~(kPage - 1);
    for (uintptr_t p = ps; p < e; p += kPage) {
      if (!InArena(p, p + kPage)) return -1;
      if (!mapped_[PageOf(p)]) return Mapped(p) ? -1 : EFAULT;
    }
    return 0;
  }

  std::map<uint64_t, int> HeldCounts() const {
    std::map<uint64_t, int> n;
    for (const Held& h : held_) ++n[h.handle];
    return n;
  }

  bool HeldIndexed(const Held& h) const { return retired_.count(h.handle) == 0; }

  // Records that a request with `remote` rights named the arena's pages in
  // [start, start + length): an rkey with those rights may reach them.
  void NameRemotely(uintptr_t start, size_t length, int remote) {
    if (remote == 0) return;
    for (uintptr_t p = start & ~(kPage - 1); p < start + length; p += kPage) {
      if (InArena(p, p + kPage)) remote_named_[remote >> 1][PageOf(p)] = true;
    }
  }

  // ---- operations ----

  void Get(std::mt19937_64& rng) {
    static const int kValid[] = {
        0,
        kAccessLocalWrite,
        kAccessRemoteRead,
        kAccessLocalWrite | kAccessRemoteRead,
        kAccessLocalWrite | kAccessRemoteWrite,
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead,
        kAccessLocalWrite | kAccessRemoteAtomic,
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic};
    int access = kValid[rng() % 8];
    uintptr_t start = arena_ + (rng() % kArenaPages) * kPage + (rng() % 4 == 0 ? rng() % kPage : 0);
    size_t length = 1 + rng() % (6 * kPage);
    if (start + length > arena_ + kArenaPages * kPage && rng() % 2 == 0) {
      length = arena_ + kArenaPages * kPage - start;  // mostly stay inside the arena
    }
    int expected;
    switch (rng() % 40) {
      case 0:  // unknown access bit
        access |= 1 << (21 + rng() % 8);
        expected = EINVAL;
        break;
      case 1:  // remote write or atomic without local write
        access =
            (rng() % 2 ? kAccessRemoteWrite : kAccessRemoteAtomic) | (access & kAccessRemoteRead);
        expected = EINVAL;
        break;
      case 2:
        length = 0;
        expected = EINVAL;
        break;
      case 3:  // wraps the address space
        length = UINTPTR_MAX - start + 1 + rng() % kPage;
        expected = EINVAL;
        break;
      default:
        expected = ExpectedMapping(start, start + length);
        break;
    }

    // A held region that is still indexed and covers the request must hit.
    bool must_hit = false;
    for (const Held& h : held_) {
      if (expected == 0 && HeldIndexed(h) && h.start <= start && start + length <= h.end &&
          (h.access & kAccessRemoteBits) == (access & kAccessRemoteBits) &&
          (h.access & access & kAccessLocalWrite) == (access & kAccessLocalWrite)) {
        must_hit = true;
      }
    }
    const int remote = access & kAccessRemoteBits;
    if (expected == 0) NameRemotely(start, length, remote);
    const uint64_t registered_before = counters_->registered;
    std::map<uint64_t, Registration> live_before;  // a miss may replace some of these
    Settle();
    {
      std::lock_guard<std::mutex> lock(counters_->mu);
      live_before = counters_->live;
    }

    auto got = cache_->Acquire(reinterpret_cast<void*>(start), length, access);
    const int err = got.ok() ? 0 : StatusToErrno(got.status());
    const bool missed = counters_->registered != registered_before;
    if (expected >= 0) {
      ASSERT_EQ(err, expected) << "get(" << Describe(start, length) << ", access " << access
                               << "): " << (got.ok() ? "ok" : got.status().ToString());
    } else if (err != 0) {
      ASSERT_EQ(err, EFAULT) << got.status();
      ++outside_gets_;
      return;
    } else {
      // A get over pages someone else had mapped succeeded: it named them
      // too, and its region may still cover them once they are ours again.
      NameRemotely(start, length, remote);
    }
    if (must_hit) {
      ASSERT_FALSE(missed) << "a held, indexed region covered the request";
    }
    if (missed) {
      puts_since_miss_ = 0;
      bytes_put_since_miss_ = 0;
    }
    if (err != 0) return;

    Region* r = *got;
    RegionInfo info = GetRegionInfo(r);
    const uintptr_t rs = reinterpret_cast<uintptr_t>(info.addr);
    const uintptr_t re = rs + info.length;
    ASSERT_LE(rs, start) << "region does not cover the request";
    ASSERT_GE(re, start + length) << "region does not cover the request";
    ASSERT_EQ(info.access & kAccessRemoteBits, access & kAccessRemoteBits)
        << "remote rights differ";
    ASSERT_EQ(info.access & access & kAccessLocalWrite, access & kAccessLocalWrite);
    uint64_t seq;
    {
      std::lock_guard<std::mutex> lock(counters_->mu);
      auto it = counters_->sequence.find(info.handle);
      ASSERT_NE(it, counters_->sequence.end()) << "returned region is not registered";
      seq = it->second;
    }
    if (expected == 0) {
      // Pages the model does not own (outside the arena, or unmapped by us and
      // since mapped by someone else, e.g. a sanitizer runtime) can only be
      // covered by a region an earlier "unknown" get registered; they must be
      // mapped now. Our own pages must be mapped and not newer than the region.
      for (uintptr_t p = rs; p < re; p += kPage) {
        if (!InArena(p, p + kPage) || !mapped_[PageOf(p)]) {
          ASSERT_TRUE(Mapped(p)) << "region covers unmapped memory";
          ++foreign_pages_;
          continue;
        }
        if (remote != 0) {
          ASSERT_TRUE(remote_named_[remote >> 1][PageOf(p)])
              << "the rkey reaches page " << PageOf(p)
              << ", which no request with its rights named";
        }
        if (invalidated_at_[PageOf(p)] >= seq) {
          ++stale_;
          FAIL() << "stale region: registered (#" << seq << ") before page " << PageOf(p)
                 << " was invalidated (at #" << invalidated_at_[PageOf(p)] << ")";
        }
      }
    }
    if (missed) {
      // Its used bytes: the request, widened by those of the regions it
      // replaces (all of it when alignment adds whole pages, which it never
      // does to a region with remote rights).
      uintptr_t us = start, ue = start + length;
      if (limits_.alignment > kPage && remote == 0) {
        us = rs;
        ue = re;
      }
      for (const auto& [handle, reg] : live_before) {
        uintptr_t s = reinterpret_cast<uintptr_t>(reg.addr);
        auto it = used_.find(handle);
        if (rs <= s && s + reg.length <= re && it != used_.end() && retired_.count(handle) == 0 &&
            (reg.access & kAccessRemoteBits) == (info.access & kAccessRemoteBits) &&
            (reg.access & ~info.access & kAccessLocalWrite) == 0) {
          us = std::min(us, it->second.first);
          ue = std::max(ue, it->second.second);
        }
      }
      used_[info.handle] = {us, ue};
      // The new region replaces (retires) every compatible region inside it.
      for (Held& h : held_) {
        if (h.handle != info.handle && rs <= h.start && h.end <= re &&
            (h.access & kAccessRemoteBits) == (info.access & kAccessRemoteBits) &&
            (h.access & ~info.access & kAccessLocalWrite) == 0) {
          retired_.insert(h.handle);
        }
      }
      Settle();
      std::lock_guard<std::mutex> lock(counters_->mu);
      auto held = HeldCounts();
      for (const auto& [handle, reg] : counters_->live) {
        uintptr_t s = reinterpret_cast<uintptr_t>(reg.addr);
        if (handle != info.handle && rs <= s && s + reg.length <= re &&
            (reg.access & kAccessRemoteBits) == (info.access & kAccessRemoteBits) &&
            (reg.access & ~info.access & kAccessLocalWrite) == 0 && held.count(handle) == 0) {
          ADD_FAILURE() << "an unused region the new one replaces is still registered";
        }
      }
    }
    held_.push_back(Held{r, info.handle, rs, re, info.access});
    if (held_.size() > 12 || rng() % 3 != 0) PutAt(held_.size() - 1);
  }

  void PutAt(size_t i) {
    Held h = held_[i];
    held_.erase(held_.begin() + i);
    ASSERT_TRUE(cache_->Put(h.region).ok());
    ++puts_since_miss_;
    bytes_put_since_miss_ += h.end - h.start;
    if (HeldCounts().count(h.handle) == 0 && !HeldIndexed(h)) {
      Settle();
      std::lock_guard<std::mutex> lock(counters_->mu);
      EXPECT_EQ(counters_->live.count(h.handle), 0u)
          << "a retired region is still registered after its last put";
      retired_.erase(h.handle);
    }
  }

  // Whether invalidating [start, end) drops a region registered as
  // [rs, re): it overlaps the region's used bytes, or a whole page of it.
  bool Drops(uint64_t handle, uintptr_t rs, uintptr_t re, uintptr_t start, uintptr_t end) const {
    auto it = used_.find(handle);
    uintptr_t us = it == used_.end() ? rs : it->second.first;
    uintptr_t ue = it == used_.end() ? re : it->second.second;
    uintptr_t ws = (start + kPage - 1) & ~(kPage - 1);
    uintptr_t we = end & ~(kPage - 1);
    return (us < end && start < ue) || (ws < we && rs < we && ws < re);
  }

  void Invalidate(uintptr_t start, size_t length) {
    ASSERT_TRUE(cache_->Invalidate(reinterpret_cast<void*>(start), length).ok());
    const uintptr_t end = start + length;
    // Only whole pages can change mapping: those are what staleness is about.
    uintptr_t ws = (start + kPage - 1) & ~(kPage - 1);
    uintptr_t we = end & ~(kPage - 1);
    for (uintptr_t p = ws; p < we; p += kPage) {
      if (InArena(p, p + kPage)) invalidated_at_[PageOf(p)] = counters_->registered;
    }
    for (const Held& h : held_) {
      if (Drops(h.handle, h.start, h.end, start, end)) retired_.insert(h.handle);
    }
    Settle();
    std::lock_guard<std::mutex> lock(counters_->mu);
    auto held = HeldCounts();
    for (const auto& [handle, reg] : counters_->live) {
      uintptr_t s = reinterpret_cast<uintptr_t>(reg.addr);
      if (held.count(handle) == 0 && Drops(handle, s, s + reg.length, start, end)) {
        ADD_FAILURE() << "an unused region whose used bytes were invalidated is still registered";
      }
    }
  }

  void Flush() {
    ASSERT_TRUE(cache_->Flush().ok());
    std::lock_guard<std::mutex> lock(counters_->mu);
    auto held = HeldCounts();
    EXPECT_EQ(counters_->live.size(), held.size()) << "flush keeps exactly the held regions";
    for (const auto& entry : held) {
      EXPECT_EQ(counters_->live.count(entry.first), 1u);
    }
  }

  // Unmaps 1-4 mapped pages (invalidating them first, as a monitor would).
  void Unmap(std::mt19937_64& rng) {
    size_t p = rng() % kArenaPages;
    size_t n = std::min<size_t>(1 + rng() % 4, kArenaPages - p);
    for (size_t i = 0; i < n; ++i) {
      if (!mapped_[p + i]) {
        n = i;
        break;
      }
    }
    if (n == 0) return;
    uintptr_t a = arena_ + p * kPage;
    Invalidate(a, n * kPage);
    ASSERT_EQ(munmap(reinterpret_cast<void*>(a), n * kPage), 0);
    for (size_t i = 0; i < n; ++i) mapped_[p + i] = false;
  }

  // Maps fresh memory at a page we unmapped (unless someone else took it).
  void Remap(std::mt19937_64& rng) {
    size_t p = rng() % kArenaPages;
    for (size_t i = 0; i < kArenaPages && mapped_[p]; ++i) p = (p + 1) % kArenaPages;
    if (mapped_[p]) return;
    void* want = reinterpret_cast<void*>(arena_ + p * kPage);
    void* got = mmap(want, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got == want) {
      mapped_[p] = true;
    } else if (got != MAP_FAILED) {
      munmap(got, kPage);  // old kernels ignore MAP_FIXED_NOREPLACE
    }
  }

  // Waits for the cache's background deregistrations (async_dereg).
  void Settle() { ASSERT_TRUE(testing::WaitForQueuedDeregistrations(*cache_)); }

  void CheckInvariants() {
    Settle();
    CacheStats s = cache_->stats();
    std::lock_guard<std::mutex> lock(counters_->mu);
    const size_t live = counters_->live.size();
    ASSERT_EQ(static_cast<size_t>(counters_->registrations - counters_->deregistrations), live);
    ASSERT_EQ(s.regions, live) << "stats.regions disagrees with the registrar";
    ASSERT_EQ(s.registrations, static_cast<uint64_t>(counters_->registrations.load()));
    auto held = HeldCounts();
    size_t unused = 0, unused_bytes = 0;
    for (const auto& [handle, reg] : counters_->live) {
      if (held.count(handle) == 0) {
        ++unused;
        unused_bytes += reg.length;
      }
    }
    for (const auto& entry : held) {
      ASSERT_EQ(counters_->live.count(entry.first), 1u) << "a held region was deregistered";
    }
    if (limits_.max_regions != 0) {
      ASSERT_LE(unused, limits_.max_regions + puts_since_miss_) << "max_regions exceeded";
    }
    if (limits_.max_bytes != 0) {
      ASSERT_LE(unused_bytes, limits_.max_bytes + bytes_put_since_miss_) << "max_bytes exceeded";
    }
  }

  std::string Describe(uintptr_t s, size_t len) const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "arena+%#lx, %#zx", static_cast<unsigned long>(s - arena_), len);
    return buf;
  }

  uintptr_t arena_ = 0;
  std::vector<bool> mapped_;
  std::vector<uint64_t> invalidated_at_;  // counters_->registered at the last invalidation
  // Per set of remote rights (index: bits >> 1), the arena pages some request
  // with exactly those rights named: all a region with them may reach.
  std::vector<bool> remote_named_[8];
  Limits limits_{};
  std::shared_ptr<RegistrarCounters> counters_;
  std::unique_ptr<Cache> cache_;
  std::vector<Held> held_;
  std::set<uint64_t> retired_;  // held regions no longer in the index
  // Per registration: the bytes requested through it (Region::used_start/end).
  std::map<uint64_t, std::pair<uintptr_t, uintptr_t>> used_;
  size_t puts_since_miss_ = 0, bytes_put_since_miss_ = 0;
  uint64_t stale_ = 0, leaked_ = 0, total_registrations_ = 0, outside_gets_ = 0, foreign_pages_ = 0;
};

TEST_F(DifferentialTest, RandomOperationsAgreeWithTheModel) {
  const uint64_t seed = EnvOr("MRCACHE_DIFF_SEED", 20261129);
  const uint64_t ops = EnvOr("MRCACHE_DIFF_OPS", 100000);
  const Limits phases[] = {
      {8, 0, size_t{1} << 30, 0},               // few regions, merging
      {0, 16 * kPage, 0, 0},                    // byte limit, no merging
      {4, 32 * kPage, 8 * kPage, 4 * kPage},    // both limits, bounded merges, alignment
      {16384, 0, size_t{1} << 30, 16 * kPage},  // defaults, wide alignment
  };
  std::mt19937_64 rng(seed);
  uint64_t done = 0;
  for (size_t phase = 0; phase < 4; ++phase) {
    StartPhase(phases[phase], phase == 1 ? AsyncDereg::kOff : AsyncDereg::kOn);
    const uint64_t until = ops * (phase + 1) / 4;
    for (; done < until; ++done) {
      const unsigned dice = rng() % 100;
      if (dice < 60) {
        Get(rng);
      } else if (dice < 80) {
        if (!held_.empty()) PutAt(rng() % held_.size());
      } else if (dice < 88) {
        uintptr_t s = arena_ + rng() % (kArenaPages * kPage);
        Invalidate(s, 1 + rng() % (4 * kPage));
      } else if (dice < 90) {
        Flush();
      } else if (dice < 95) {
        Unmap(rng);
      } else {
        Remap(rng);
      }
      CheckInvariants();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
        FAIL() << "after operation " << done << " (seed " << seed << ")";
      }
    }
    EndPhase();
  }
  EXPECT_EQ(stale_, 0u);
  EXPECT_EQ(leaked_, 0u);
  std::printf(
      "RELIABILITY differential ops=%llu seed=%llu registrations=%llu stale=%llu leaked=%llu "
      "outside_arena_gets=%llu foreign_pages=%llu\n",
      static_cast<unsigned long long>(done), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(total_registrations_),
      static_cast<unsigned long long>(stale_), static_cast<unsigned long long>(leaked_),
      static_cast<unsigned long long>(outside_gets_),
      static_cast<unsigned long long>(foreign_pages_));
}

}  // namespace
}  // namespace mrcache
