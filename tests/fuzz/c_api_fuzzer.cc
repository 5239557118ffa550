// c_api_fuzzer.cc: a libFuzzer target over the C API (mrcache.h).
//
// The input's first two bytes choose the cache's limits (max_regions,
// max_bytes, max_merge_bytes, alignment) and async_dereg (auto, which is on
// for this registrar, or off); every following 4 bytes are one
// operation: get (random ranges and access flags, valid or not), put,
// invalidate, flush, unmap / remap of test memory (invalidated first, as a
// monitor would), or arming a registrar failure (ENOMEM, EAGAIN, EFAULT,
// EINTR). The registrar is a custom one (mrc_registrar_ops_t) that plays the
// kernel: it knows which test pages are mapped, fails when armed, and keeps a
// ledger of live registrations with their registration order.
//
// After every operation (and its background deregistrations, waited for
// through stats.dereg_queue_depth), the invariants of the differential test hold, or the
// target aborts:
//  - a get's errno is EINVAL for bad arguments, EFAULT when a page is not
//    mapped, the armed errno when a failure was armed, success otherwise;
//  - a returned region covers the request, has the requested remote rights
//    (never more) and at least the local ones, and is newer than the last
//    whole-page invalidation of every page it covers (no stale region);
//  - after an invalidate, no unused region is registered whose used bytes
//    (requested through it or the regions it merged) or whole pages the
//    range overlaps;
//  - stats.regions == live registrations in the ledger; every held region is
//    live; unused regions respect the limits (up to the puts since the last
//    miss); after flush only held regions stay registered;
//  - when the cache is destroyed, every registration has been deregistered
//    exactly once.
// Built with clang and -fsanitize=fuzzer by scripts/fuzz; the seed corpus
// (tests/fuzz/corpus) also runs under Bazel's gcc builds as a regression test
// (c_api_fuzzer_corpus_test).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "mrcache/mrcache.h"

namespace {

constexpr size_t kPages = 32;
constexpr int kLW = 1, kRW = 2, kRR = 4, kRA = 8;
constexpr int kRemote = kRW | kRR | kRA;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

#define CHECK(cond, what)                                                                    \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "c_api_fuzzer: invariant violated: %s (%s:%d)\n", what, __FILE__, \
                   __LINE__);                                                                \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

struct Live {
  uintptr_t start;
  size_t length;
  int access;
  uint64_t seq;
};

// The "kernel" behind the custom registrar, and the model.
struct World {
  uintptr_t arena = 0;
  bool mapped[kPages];
  uint64_t invalidated_at[kPages];  // seq at the page's last invalidation
  uint64_t seq = 0;                 // registrations so far
  // Guards live and deregistered_twice: the deregistration thread
  // (async_dereg) calls FuzzDereg beside the operations' FuzzReg.
  std::mutex mu;
  std::map<uint64_t, Live> live;  // by handle
  // By handle: the bytes requested through a registration (and through the
  // registrations it replaced), as Region::used_start/used_end.
  std::map<uint64_t, std::pair<uintptr_t, uintptr_t>> used;
  std::set<uint64_t> retired;  // out of the cache's index (still registered while held)
  int fault_errno = 0, fault_count = 0;
  int deregistered_twice = 0;
};

bool RangeMapped(const World& w, uintptr_t s, size_t len) {
  if (len == 0 || s + len < s || s < w.arena || s + len > w.arena + kPages * kPage) return false;
  for (uintptr_t p = (s - w.arena) / kPage; p < (s + len - w.arena + kPage - 1) / kPage; ++p) {
    if (!w.mapped[p]) return false;
  }
  return true;
}

int FuzzReg(void* ctx, void* addr, size_t length, int access, uint64_t* handle, uint32_t* lkey,
            uint32_t* rkey) {
  World& w = *static_cast<World*>(ctx);
  if (w.fault_count > 0) {
    --w.fault_count;
    return w.fault_errno;
  }
  uintptr_t s = reinterpret_cast<uintptr_t>(addr);
  if (!RangeMapped(w, s, length)) return EFAULT;
  *handle = ++w.seq;
  *lkey = *rkey = static_cast<uint32_t>(*handle);
  std::lock_guard<std::mutex> lock(w.mu);
  w.live[*handle] = Live{s, length, access, *handle};
  return 0;
}

int FuzzDereg(void* ctx, uint64_t handle) {
  World& w = *static_cast<World*>(ctx);
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.live.erase(handle) != 1) ++w.deregistered_twice;
  return 0;
}

// Waits until the cache's background deregistrations are done
// (stats.dereg_queue_depth 0), so that the ledger shows what the cache
// released; they run on another thread with async_dereg on.
void Settle(const mrc_cache_t* cache) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    mrc_stats_t st;
    CHECK(mrc_stats(cache, &st) == 0, "stats");
    if (st.dereg_queue_depth == 0) return;
    CHECK(std::chrono::steady_clock::now() < deadline, "queued deregistrations finish");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

struct Held {
  mrc_region_t* region;
  uint64_t handle;
  uintptr_t start, end;
  int access;
};

// Access flags a get may ask for: 12 valid, 4 invalid.
const int kAccess[16] = {
    0,   kLW, kRR,       kLW | kRR, kLW | kRW, kLW | kRW | kRR, kLW | kRA, kLW | kRW | kRR | kRA,
    kRR, kLW, kLW | kRR, kLW | kRW, kRW,       kRA | kRR,       1 << 28,   kLW | (1 << 12)};
bool ValidAccess(int a) {
  return (a & ~0xff) == 0 && (a & 0xf0) == 0 && (!(a & (kRW | kRA)) || (a & kLW));
}

void RunOne(const uint8_t* data, size_t size) {
  static uintptr_t arena = [] {
    const size_t align = 4 * kPage;
    char* raw = static_cast<char*>(mmap(nullptr, kPages * kPage + align, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    CHECK(raw != MAP_FAILED, "test memory");
    return (reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1);
  }();
  if (size < 2) return;
  World w;
  w.arena = arena;
  for (size_t p = 0; p < kPages; ++p) {
    w.mapped[p] = true;
    w.invalidated_at[p] = 0;
  }

  const size_t max_regions = data[0] % 8;
  const size_t max_bytes = ((data[0] >> 3) % 4) * 8 * kPage;
  const size_t merge = (data[1] & 1) ? (size_t{1} << 30) : (data[1] & 2) ? 4 * kPage : 0;
  const size_t alignment = kPage << ((data[1] >> 2) % 3);
  mrc_config_t* cfg;
  CHECK(mrc_config_create(&cfg) == 0, "config");
  char text[32];
  std::snprintf(text, sizeof text, "%zu", max_regions);
  CHECK(mrc_config_set(cfg, "max_regions", text) == 0, "max_regions");
  std::snprintf(text, sizeof text, "%zu", max_bytes);
  CHECK(mrc_config_set(cfg, "max_bytes", text) == 0, "max_bytes");
  std::snprintf(text, sizeof text, "%zu", merge);
  CHECK(mrc_config_set(cfg, "max_merge_bytes", text) == 0, "max_merge_bytes");
  std::snprintf(text, sizeof text, "%zu", alignment);
  CHECK(mrc_config_set(cfg, "alignment", text) == 0, "alignment");
  CHECK(mrc_config_set(cfg, "monitor", "none") == 0, "monitor");
  CHECK(mrc_config_set(cfg, "async_dereg", (data[1] & 0x40) ? "off" : "auto") == 0, "async_dereg");
  CHECK(mrc_config_set(cfg, "async_dereg_bytes", "0") == 0, "async_dereg_bytes");
  mrc_registrar_ops_t ops{FuzzReg, FuzzDereg};
  mrc_cache_t* cache;
  CHECK(mrc_cache_create_custom(cfg, &ops, &w, &cache) == 0, "cache");
  mrc_config_destroy(cfg);

  std::vector<Held> held;
  size_t puts_since_miss = 0, bytes_put_since_miss = 0;
  auto held_count = [&held](uint64_t handle) {
    size_t n = 0;
    for (const Held& h : held) n += h.handle == handle;
    return n;
  };
  auto put_at = [&](size_t i) {
    Held h = held[i];
    held.erase(held.begin() + i);
    CHECK(mrc_put(cache, h.region) == 0, "put of a held region");
    ++puts_since_miss;
    bytes_put_since_miss += h.end - h.start;
  };
  auto invalidate = [&](uintptr_t s, size_t len) {
    CHECK(mrc_invalidate(cache, reinterpret_cast<void*>(s), len) == 0, "invalidate");
    Settle(cache);
    // Only whole pages change mapping; a region is dropped if the range
    // overlaps its used bytes or a whole page of it.
    uintptr_t ws = (s + kPage - 1) & ~(kPage - 1), we = (s + len) & ~(kPage - 1);
    for (uintptr_t p = ws; p < we; p += kPage) {
      if (p >= arena && p < arena + kPages * kPage) w.invalidated_at[(p - arena) / kPage] = w.seq;
    }
    for (const auto& [handle, l] : w.live) {
      auto u = w.used.find(handle);
      uintptr_t us = u == w.used.end() ? l.start : u->second.first;
      uintptr_t ue = u == w.used.end() ? l.start + l.length : u->second.second;
      bool drops = (us < s + len && s < ue) || (ws < we && l.start < we && ws < l.start + l.length);
      CHECK(!drops || held_count(handle) > 0,
            "an unused region whose used bytes were invalidated is still registered");
      if (drops) w.retired.insert(handle);
    }
  };

  for (size_t i = 2; i + 4 <= size; i += 4) {
    const uint8_t op = data[i], x = data[i + 1], y = data[i + 2], z = data[i + 3];
    switch (op % 10) {
      case 0:
      case 1:
      case 2: {  // get
        uintptr_t start = arena + (x % kPages) * kPage + (y & 7) * (kPage / 8);
        size_t length = (z % 6) * kPage + (y >> 3) * (kPage / 32) + 1;
        int access = kAccess[(z >> 4) % 16];
        if (op % 7 == 5) length = 0;
        if (op % 11 == 7) length = SIZE_MAX - (y + 1);
        const bool bad_args = length == 0 || start + length < start || !ValidAccess(access);
        const bool armed = w.fault_count > 0;
        const int armed_errno = w.fault_errno;
        const uint64_t seq_before = w.seq;
        const std::map<uint64_t, Live> live_before = w.live;  // a miss may replace some
        mrc_region_t* r = nullptr;
        int err = mrc_get(cache, reinterpret_cast<void*>(start), length, access, &r);
        // The get's evictions may be deregistered on the background thread,
        // which erases from the ledger: wait for them, and take the ledger's
        // lock once so that their erasures happen before the reads below.
        Settle(cache);
        { std::lock_guard<std::mutex> sync(w.mu); }
        if (w.seq != seq_before) puts_since_miss = bytes_put_since_miss = 0;
        if (bad_args) {
          CHECK(err == EINVAL, "bad arguments must be EINVAL");
          break;
        }
        if (err != 0) {
          CHECK((armed && err == armed_errno) || (err == EFAULT && !RangeMapped(w, start, length)),
                "a get failed without a reason");
          break;
        }
        CHECK(RangeMapped(w, start, length), "a get over unmapped memory succeeded");
        mrc_region_info_t info;
        mrc_region_info(r, &info);
        uintptr_t rs = reinterpret_cast<uintptr_t>(info.addr), re = rs + info.length;
        CHECK(rs <= start && start + length <= re, "region covers the request");
        CHECK((info.access & kRemote) == (access & kRemote),
              "remote rights are exactly the requested ones");
        CHECK((info.access & access & kLW) == (access & kLW), "local rights are a superset");
        auto it = w.live.find(mrc_region_handle(r));
        CHECK(it != w.live.end(), "returned region is registered");
        if (w.seq != seq_before) {  // a miss: the model learns the new region's used bytes
          // Alignment above the page size never widens remote rights.
          const bool whole = alignment > kPage && (access & kRemote) == 0;
          uintptr_t us = whole ? rs : start;
          uintptr_t ue = whole ? re : start + length;
          // The new region replaces every compatible region it contains,
          // whatever plan it came from (a retry after an armed ENOMEM/EAGAIN
          // included). Regions gone from the ledger were evicted, and may
          // have been before the merge: their used bytes are left out, so the
          // model's used range never exceeds the cache's.
          for (const auto& [handle, l] : live_before) {
            auto u = w.used.find(handle);
            if (w.live.count(handle) == 0) continue;
            if (u != w.used.end() && w.retired.count(handle) == 0 && rs <= l.start &&
                l.start + l.length <= re && (l.access & kRemote) == (info.access & kRemote) &&
                (l.access & ~info.access) == 0) {
              us = std::min(us, u->second.first);
              ue = std::max(ue, u->second.second);
              w.retired.insert(handle);  // merged away
            }
          }
          w.used[it->first] = {us, ue};
        }
        CHECK(RangeMapped(w, rs, info.length), "region lies in mapped memory");
        for (uintptr_t p = rs; p < re; p += kPage) {
          CHECK(w.invalidated_at[(p - arena) / kPage] < it->second.seq, "stale region returned");
        }
        held.push_back(Held{r, it->first, rs, re, info.access});
        if (held.size() > 8) put_at(0);
        break;
      }
      case 3:
      case 4:
        if (!held.empty()) put_at(x % held.size());
        break;
      case 5:
        invalidate(arena + (x % kPages) * kPage + y, (z % 4) * kPage + 1);
        break;
      case 6: {
        CHECK(mrc_flush(cache) == 0, "flush");
        for (const auto& entry : w.live)
          CHECK(held_count(entry.first) > 0, "flush keeps only held regions");
        break;
      }
      case 7: {  // unmap
        size_t p = x % kPages, n = std::min<size_t>(1 + y % 3, kPages - p);
        invalidate(arena + p * kPage, n * kPage);
        for (size_t k = 0; k < n; ++k) w.mapped[p + k] = false;
        break;
      }
      case 8: {  // remap (fresh pages at the same address)
        size_t p = x % kPages, n = std::min<size_t>(1 + y % 3, kPages - p);
        for (size_t k = 0; k < n; ++k) w.mapped[p + k] = true;
        break;
      }
      case 9: {
        static const int kErrnos[4] = {ENOMEM, EAGAIN, EFAULT, EINTR};
        w.fault_errno = kErrnos[x % 4];
        w.fault_count = 1 + y % 2;
        break;
      }
    }
    // After every operation.
    Settle(cache);
    mrc_stats_t st;
    mrc_stats(cache, &st);
    CHECK(st.regions == w.live.size(), "stats.regions == live registrations");
    CHECK(w.deregistered_twice == 0, "a handle was deregistered twice");
    size_t unused = 0, unused_bytes = 0;
    for (const auto& [handle, l] : w.live) {
      if (held_count(handle) == 0) ++unused, unused_bytes += l.length;
    }
    for (const Held& h : held) CHECK(w.live.count(h.handle) == 1, "a held region is registered");
    CHECK(max_regions == 0 || unused <= max_regions + puts_since_miss,
          "max_regions holds for unused regions");
    CHECK(max_bytes == 0 || unused_bytes <= max_bytes + bytes_put_since_miss,
          "max_bytes holds for unused regions");
  }
  while (!held.empty()) put_at(held.size() - 1);
  mrc_cache_destroy(cache);
  CHECK(w.live.empty(), "every registration was deregistered at destroy");
  CHECK(w.deregistered_twice == 0, "a handle was deregistered twice");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(data, size);
  return 0;
}
