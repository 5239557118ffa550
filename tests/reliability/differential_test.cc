// differential_test.cc: the cache against a small, obviously correct model.
//
// A seeded random sequence of operations (get with random ranges and access
// flags, valid and invalid; put; invalidate; flush; unmap + remap of test
// memory, each unmap preceded by an explicit invalidate as a monitor would;
// "limit changes": the sequence runs in phases, each on a cache created with
// different limits, since limits are fixed at creation) is applied to a real
// cache over the sim registrar (zero cost) wrapped in a CountingRegistrar.
// Beside it, another owner in the process (as a sanitizer runtime's allocator
// does) maps pages in the holes the test leaves and unmaps them without
// invalidating: with monitor "none" the cache cannot learn of that, so a
// region registered over their page may be served after it is gone.
// The model owns the arena and a guard of pages on each side that stay mapped
// (wide enough that no region the cache builds reaches past them). It knows
// which pages are mapped, when each page was last invalidated as a whole
// (only whole pages change mapping), which regions the test holds, and the
// bytes requested through each registration. After every operation:
//  - the errno of a get is the model's (EINVAL for bad arguments, EFAULT when
//    a requested page is unmapped, success otherwise; unknown over the other
//    owner's pages, and success allowed over a page we unmapped if the region
//    served was registered since, when the other owner had it mapped);
//  - a returned region covers the request, has exactly the requested remote
//    rights and at least the requested local ones, lies in the model's
//    memory, and was registered after the last whole-page invalidation of
//    every page it covers (no stale region), including pages we unmapped;
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
// Prints: "RELIABILITY differential ops=N seed=S registrations=R stale=0 leaked=0
// outside_arena_gets=G foreign_pages=F other_owner_unmaps=U" (G: gets over
// another owner's pages that failed; F: their pages covered by regions
// served to gets of ours; U: their unmaps the cache was not told of).
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
// Gets start in the arena, where the test unmaps and remaps pages.
constexpr size_t kArenaPages = 64;
// A get spans at most this many pages (plus part of one)...
constexpr size_t kMaxGetPages = 6;
// ...and the phases align regions to at most this many; the arena is aligned
// to it, so an aligned region ends at most this far past the arena's end.
constexpr size_t kMaxAlignmentPages = 16;
static_assert(kMaxGetPages <= kMaxAlignmentPages, "a get must not reach past the guard");
// On each side of the arena the test keeps this many pages mapped throughout
// (the guards): every region the cache may build lies in memory the model
// owns, so none can cover pages another owner (a sanitizer runtime's
// allocator) unmaps unseen, which with monitor "none" nobody would invalidate.
constexpr size_t kGuardPages = kMaxAlignmentPages;
// The model's memory: guard, arena, guard.
constexpr size_t kModelPages = kGuardPages + kArenaPages + kGuardPages;

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
    // The arena (and so the model's memory, whose guards are whole multiples
    // of it) is aligned to the widest alignment so that aligned regions stay
    // inside the model's memory.
    const size_t align = kMaxAlignmentPages * kPage;
    size_t span = kModelPages * kPage + align;
    char* raw = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ASSERT_NE(raw, MAP_FAILED);
    uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1);
    if (a > reinterpret_cast<uintptr_t>(raw)) munmap(raw, a - reinterpret_cast<uintptr_t>(raw));
    uintptr_t tail = a + kModelPages * kPage;
    uintptr_t raw_end = reinterpret_cast<uintptr_t>(raw) + span;
    if (raw_end > tail) munmap(reinterpret_cast<void*>(tail), raw_end - tail);
    memory_ = a;
    arena_ = a + kGuardPages * kPage;
    mapped_.assign(kModelPages, true);
    invalidated_at_.assign(kModelPages, 0);
  }

  void TearDown() override {
    for (uintptr_t page : others_) munmap(reinterpret_cast<void*>(page), kPage);
    for (size_t p = 0; p < kModelPages; ++p) {
      if (mapped_[p]) munmap(reinterpret_cast<void*>(memory_ + p * kPage), kPage);
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
    origin_.clear();
    // Sequence numbers restart with the new registrar.
    invalidated_at_.assign(kModelPages, 0);
    for (auto& named : remote_named_) named.assign(kModelPages, false);
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

  // The model's index of the page at `addr` (in its memory).
  size_t PageOf(uintptr_t addr) const { return (addr - memory_) / kPage; }
  // The model's index of the arena's page `p`.
  static size_t ArenaPage(size_t p) { return kGuardPages + p; }
  // Whether [s, e) lies in the model's memory (arena and guards).
  bool Owned(uintptr_t s, uintptr_t e) const {
    return s >= memory_ && e <= memory_ + kModelPages * kPage;
  }

  // For a get of [s, e): 0 if every page is ours and mapped, EFAULT if one of
  // ours is unmapped, -1 if a page is unknown (outside the model's memory, or
  // an unmapped page someone else mapped since).
  int ExpectedMapping(uintptr_t s, uintptr_t e) const {
    uintptr_t ps = s & ~(kPage - 1);
    for (uintptr_t p = ps; p < e; p += kPage) {
      if (!Owned(p, p + kPage)) return -1;
      if (!mapped_[PageOf(p)]) return Mapped(p) ? -1 : EFAULT;
    }
    return 0;
  }

  // Whether `r`, served to a get of [s, e), was registered after our last
  // invalidation of every page in it we unmapped: the registrar then found
  // those pages mapped, by another owner. (A region registered before is
  // stale, and serving it is the cache's error.)
  bool RegisteredSinceOurUnmaps(Region* r, uintptr_t s, uintptr_t e) const {
    std::lock_guard<std::mutex> lock(counters_->mu);
    auto seq = counters_->sequence.find(GetRegionInfo(r).handle);
    if (seq == counters_->sequence.end()) return false;
    for (uintptr_t p = s & ~(kPage - 1); p < e; p += kPage) {
      if (Owned(p, p + kPage) && !mapped_[PageOf(p)] && invalidated_at_[PageOf(p)] >= seq->second) {
        return false;
      }
    }
    return true;
  }

  // Whether a live registration covers the page at `p`, unmapped by us, that
  // was made after we invalidated it: the registrar found the page mapped, by
  // another owner. They may have unmapped it since, unseen with monitor
  // "none", and the cache may still serve the region.
  bool ForeignCovered(uintptr_t p) const {
    std::lock_guard<std::mutex> lock(counters_->mu);
    for (const auto& [handle, reg] : counters_->live) {
      const uintptr_t s = reinterpret_cast<uintptr_t>(reg.addr);
      if (s < p + kPage && p < s + reg.length &&
          counters_->sequence.at(handle) > invalidated_at_[PageOf(p)]) {
        return true;
      }
    }
    return false;
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
      if (Owned(p, p + kPage)) remote_named_[remote >> 1][PageOf(p)] = true;
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
    size_t length = 1 + rng() % (kMaxGetPages * kPage);
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
    if (expected == EFAULT && got.ok() && RegisteredSinceOurUnmaps(*got, start, start + length)) {
      // Another owner mapped the page we left unmapped, before the get or
      // during it (another thread: the cache's own, or a sanitizer runtime's
      // allocations for it): what it serves is theirs, unknown to the model.
      expected = -1;
    }
    if (expected >= 0) {
      ASSERT_EQ(err, expected) << "get(" << Describe(start, length) << ", access " << access
                               << "): "
                               << (got.ok() ? "ok, " + Explain(GetRegionInfo(*got), missed)
                                            : got.status().ToString());
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
      // Every region the cache may build lies in the model's memory (see
      // kGuardPages), and none was registered before the last invalidation
      // of a page it covers. That holds for pages we unmapped too: Unmap
      // invalidates first, so a region covering such a page was registered
      // since, while the page was mapped (the registrar checks) by someone
      // else, e.g. a sanitizer runtime, who may have unmapped it again
      // without anyone invalidating it (monitor "none"): it is foreign.
      ASSERT_TRUE(Owned(rs, re)) << "region reaches beyond the test's memory\n"
                                 << Explain(info, missed);
      for (uintptr_t p = rs; p < re; p += kPage) {
        if (invalidated_at_[PageOf(p)] >= seq) {
          ++stale_;
          FAIL() << "stale region: registered (#" << seq << ") before page " << Describe(p, kPage)
                 << " was invalidated (at #" << invalidated_at_[PageOf(p)] << ")\n"
                 << Explain(info, missed);
        }
        if (!mapped_[PageOf(p)]) {
          ++foreign_pages_;
          continue;
        }
        if (remote != 0) {
          ASSERT_TRUE(remote_named_[remote >> 1][PageOf(p)])
              << "the rkey reaches page " << Describe(p, kPage)
              << ", which no request with its rights named";
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
      origin_[info.handle] = Origin{op_, start, length, access, expected};
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
      if (Owned(p, p + kPage)) invalidated_at_[PageOf(p)] = counters_->registered;
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

  // Unmaps 1-4 mapped arena pages (invalidating them first, as a monitor would).
  void Unmap(std::mt19937_64& rng) {
    size_t p = rng() % kArenaPages;
    size_t n = std::min<size_t>(1 + rng() % 4, kArenaPages - p);
    for (size_t i = 0; i < n; ++i) {
      if (!mapped_[ArenaPage(p + i)]) {
        n = i;
        break;
      }
    }
    if (n == 0) return;
    uintptr_t a = arena_ + p * kPage;
    Invalidate(a, n * kPage);
    ASSERT_EQ(munmap(reinterpret_cast<void*>(a), n * kPage), 0);
    for (size_t i = 0; i < n; ++i) mapped_[ArenaPage(p + i)] = false;
  }

  // Maps a fresh page at `page`; false if something is mapped there already.
  static bool MapPageAt(uintptr_t page) {
    void* want = reinterpret_cast<void*>(page);
    void* got = mmap(want, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (got != want && got != MAP_FAILED) munmap(got, kPage);  // old kernels ignore the flag
    return got == want;
  }

  // Maps fresh memory at an arena page we unmapped (unless someone else took
  // it). If a region registered over someone else's mapping there still
  // covers it, invalidates the page: their unmap went unreported (monitor
  // "none"), and a monitor would have reported it.
  void Remap(std::mt19937_64& rng) {
    size_t p = rng() % kArenaPages;
    for (size_t i = 0; i < kArenaPages && mapped_[ArenaPage(p)]; ++i) p = (p + 1) % kArenaPages;
    if (mapped_[ArenaPage(p)] || !MapPageAt(arena_ + p * kPage)) return;
    if (ForeignCovered(arena_ + p * kPage)) Invalidate(arena_ + p * kPage, kPage);
    mapped_[ArenaPage(p)] = true;
  }

  // Someone else in the process (as a sanitizer runtime's allocator does)
  // maps a page in a hole we left, or unmaps one of theirs, never
  // invalidating: with monitor "none" the cache does not learn of it. Drawn
  // from its own random stream, so the test's operations stay its seed's.
  void OtherOwnerMapsOrUnmaps() {
    if (!others_.empty() && others_rng_() % 2 == 0) {
      const size_t i = others_rng_() % others_.size();
      ASSERT_EQ(munmap(reinterpret_cast<void*>(others_[i]), kPage), 0);
      others_.erase(others_.begin() + static_cast<long>(i));
      ++other_unmaps_;
      return;
    }
    const size_t p = others_rng_() % kArenaPages;
    if (!mapped_[ArenaPage(p)] && MapPageAt(arena_ + p * kPage)) {
      others_.push_back(arena_ + p * kPage);
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

  // [s, s + len) relative to the arena.
  std::string Describe(uintptr_t s, size_t len) const {
    char buf[96];
    const bool below = s < arena_;
    std::snprintf(buf, sizeof buf, "arena%c%#lx, %#zx", below ? '-' : '+',
                  static_cast<unsigned long>(below ? arena_ - s : s - arena_), len);
    return buf;
  }

  // For a failure: the region, the get that registered it, the model's state
  // of every page it covers (number relative to the arena: ours or unmapped
  // by us, with the sequence number of its last invalidation; mapped now or
  // not) and the process's mappings around the model's memory.
  std::string Explain(const RegionInfo& info, bool missed) const {
    const uint64_t handle = info.handle;
    const uintptr_t rs = reinterpret_cast<uintptr_t>(info.addr);
    const uintptr_t re = rs + info.length;
    std::string out =
        "region " + Describe(rs, re - rs) + (missed ? " (registered by this get)" : " (a hit)");
    if (auto o = origin_.find(handle); o != origin_.end()) {
      out += ", registered by operation " + std::to_string(o->second.op) + ": get(" +
             Describe(o->second.start, o->second.length) + ", access " +
             std::to_string(o->second.access) + ") expecting " + std::to_string(o->second.expected);
    }
    {
      std::lock_guard<std::mutex> lock(counters_->mu);
      auto it = counters_->sequence.find(handle);
      out += " as #" + std::to_string(it == counters_->sequence.end() ? 0 : it->second) +
             "; now operation " + std::to_string(op_) + ", #" +
             std::to_string(counters_->registered);
    }
    out += "\npages:";
    for (uintptr_t p = rs; p < re; p += kPage) {
      const long page = p >= arena_ ? static_cast<long>((p - arena_) / kPage)
                                    : -static_cast<long>((arena_ - p) / kPage);
      out += " " + std::to_string(page) + ":";
      if (!Owned(p, p + kPage)) {
        out += "not-ours";
      } else {
        out += mapped_[PageOf(p)] ? "ours" : "unmapped-by-us";
        out += "@" + std::to_string(invalidated_at_[PageOf(p)]);
      }
      out += Mapped(p) ? "/mapped" : "/UNMAPPED";
    }
    out += "\nmappings around the test's memory:\n";
    if (FILE* f = std::fopen("/proc/self/maps", "r")) {
      const uintptr_t span = kModelPages * kPage;
      char line[512];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && hi + span > memory_ &&
            lo < memory_ + 2 * span) {
          out += line;
        }
      }
      std::fclose(f);
    }
    return out;
  }

  // Which get registered a region.
  struct Origin {
    uint64_t op;
    uintptr_t start;
    size_t length;
    int access, expected;
  };

  uint64_t op_ = 0;                    // the operation under way
  std::map<uint64_t, Origin> origin_;  // by handle, for registrations made this phase
  uintptr_t memory_ = 0;               // the model's memory: guard, arena, guard
  uintptr_t arena_ = 0;
  std::vector<bool> mapped_;
  std::vector<uint64_t> invalidated_at_;  // counters_->registered at the last invalidation
  // Per set of remote rights (index: bits >> 1), the model's pages some request
  // with exactly those rights named: all a region with them may reach.
  std::vector<bool> remote_named_[8];
  Limits limits_{};
  std::shared_ptr<RegistrarCounters> counters_;
  std::unique_ptr<Cache> cache_;
  std::vector<Held> held_;
  // Pages someone else mapped in the arena's holes, and their random stream.
  std::vector<uintptr_t> others_;
  std::mt19937_64 others_rng_;
  std::set<uint64_t> retired_;  // held regions no longer in the index
  // Per registration: the bytes requested through it (Region::used_start/end).
  std::map<uint64_t, std::pair<uintptr_t, uintptr_t>> used_;
  size_t puts_since_miss_ = 0, bytes_put_since_miss_ = 0;
  uint64_t stale_ = 0, leaked_ = 0, total_registrations_ = 0, outside_gets_ = 0, foreign_pages_ = 0,
           other_unmaps_ = 0;
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
  others_rng_.seed(seed + 1);
  uint64_t done = 0;
  for (size_t phase = 0; phase < 4; ++phase) {
    StartPhase(phases[phase], phase == 1 ? AsyncDereg::kOff : AsyncDereg::kOn);
    const uint64_t until = ops * (phase + 1) / 4;
    for (; done < until; ++done) {
      op_ = done;
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
      if (dice >= 90) OtherOwnerMapsOrUnmaps();
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
      "outside_arena_gets=%llu foreign_pages=%llu other_owner_unmaps=%llu\n",
      static_cast<unsigned long long>(done), static_cast<unsigned long long>(seed),
      static_cast<unsigned long long>(total_registrations_),
      static_cast<unsigned long long>(stale_), static_cast<unsigned long long>(leaked_),
      static_cast<unsigned long long>(outside_gets_),
      static_cast<unsigned long long>(foreign_pages_),
      static_cast<unsigned long long>(other_unmaps_));
}

}  // namespace
}  // namespace mrcache
