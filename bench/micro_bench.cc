// micro_bench: the cost of mrcache's hit, miss and invalidation paths, and
// UCX 1.13's ucs_rcache hit and miss paths in the same run, so that every
// ratio in bench/RESULTS.md comes from one measurement.
//
//   BM_MrcacheHit / BM_UcxHit       get+put of a cached region, cycling over
//                                   64 or 4,096 registered regions; with 2
//                                   threads both threads use the SAME regions
//   BM_MrcacheMiss / BM_UcxMiss     get+put that always misses (4,096 ranges
//                                   cycled through a 63-region cache): lookup,
//                                   registration, eviction, all at zero
//                                   registrar cost (pure cache overhead).
//                                   63: below mrcache's admission threshold
//                                   (64), so that every miss is cached and
//                                   evicts, as UCX's does
//   BM_MrcacheMissLocalAccess /     the same with local rights only (default
//   BM_UcxMissLocalAccess           monitor): a miss that may merge and bridge
//   BM_MrcacheMissNotAdmitted       the same through 64 regions: each range
//                                   is new to the full cache, which registers
//                                   it for the get alone (README, "Admission
//                                   when the cache is full")
//   BM_MrcacheMissAfterInvalidate   invalidate a cached range, then get it:
//                                   the drain of the invalidation ring plus a
//                                   miss (compare with BM_MrcacheMiss)
//   BM_MrcacheFirstMissBesideARegion  the first miss near a region of a fresh
//                                   cache with monitor=patch: a miss plus the
//                                   bridging probe (the gap is not resident)
//
//   BM_MrcacheHitDefaultMonitor,    the same with the default monitor (`auto`:
//   BM_MrcacheMissDefaultMonitor    patch here) instead of none
//   BM_MrcacheMissNullRegistrar /   BM_MrcacheMissDefaultMonitor / BM_UcxMiss
//   BM_UcxMissNullRegistrar         with a registrar that makes no system call
//                                   (NullRegistrar): each cache's own miss
//                                   path alone, without the sim registrar's
//                                   mapping probe (mincore), whose cost varies
//                                   more between runs than the caches differ
//
//   BM_MrcacheMissSyscallTiming /   the miss with a registrar that makes only
//   BM_UcxMissSyscallTiming         the sim registrar's mincore and times it
//                                   (counter syscall_ns): the kernel's share
//                                   of each cache's miss, measured inside it
//   BM_MrcacheMissPhases /          the default-monitor miss over the zero-cost
//   BM_UcxMissPhases                sim registrar, split at the registrar call
//                                   (counters before_registrar_ns,
//                                   registrar_ns, after_registrar_ns, put_ns;
//                                   each TSC read adds a few ns to its phase)
//   BM_MissPairDefaultMonitor /     the default-monitor miss and UCX's (both
//   BM_MissPairNullRegistrar        over the zero-cost sim registrar), or both
//                                   over NullRegistrar, interleaved: blocks of
//                                   32 misses through each cache in turn, each
//                                   block timed with the TSC. Counters:
//                                   mrcache_ns and ucx_ns (medians over the
//                                   blocks, ns per miss) and ratio (median of
//                                   each pair of adjacent blocks' mrcache/UCX).
//                                   A host whose speed drifts between the
//                                   separate benchmarks above moves both
//                                   halves of a pair alike
//
//   BM_MrcacheRandomHit /           get+put of a cached region in pseudo-random
//   BM_UcxRandomHit                 order over 64, 10,000, 100,000 or 1,000,000
//                                   regions 64 KiB apart (4 KiB gets at +64);
//                                   monitor none, UCX hooks off; with 2 threads
//                                   both use the same regions
//   BM_MrcacheHitUnderChurn /       get+put cycling over 64 cached regions
//   BM_UcxHitUnderChurn             while another thread maps, touches and
//                                   unmaps 4 KiB of unrelated memory at 1 or
//                                   10 per ms, or as fast as it can (arg 0).
//                                   mrcache runs the default monitor; UCX
//                                   gets every release reported as its hooks
//                                   would (ucm_vm_munmap, ucs_api.h). The
//                                   `releases_per_ms` counter is the
//                                   churner's rate during the timed loop.
//   BM_MrcacheHitUnderMunmapStorm / the same over 64 or 4,096 regions while
//   BM_UcxHitUnderMunmapStorm       the churner maps and unmaps 4 KiB as fast
//                                   as it can without touching it (no TLB
//                                   shootdown: the rate the other threads
//                                   allow the touching churner on a VM is
//                                   below 100 per ms)
//   BM_MrcacheRandomHitUnderRegionChurn /  the random hits over 10,000 or
//   BM_UcxRandomHitUnderRegionChurn   100,000 regions while the churner also
//                                   gets and puts each page it maps, so that
//                                   each of its unmaps (10 per ms, or as fast
//                                   as it can) invalidates a cached region of
//                                   the same cache, unrelated to the hits
//
// The registrar is `sim` with sim_base_ns = sim_page_ns = 0. mrcache runs with
// monitor=none unless the name says DefaultMonitor; UCX is loaded with
// UCX_MEM_MMAP_HOOK_MODE=none (ucs_api.h), which main() checks before any
// benchmark runs.
#include <sys/mman.h>

#include <time.h>
#include <x86intrin.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/ucs_api.h"
#include "bench/ucx_rcache.h"
#include "benchmark/benchmark.h"
#include "mrcache/cache.h"
#include "mrcache/core/tick_rate.h"
#include "mrcache/registrars/sim_registrar.h"

namespace mrbench {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMaxRanges = 4096;
constexpr int kAccess = 7;  // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
// Local rights alone (send buffers, most of a storage engine's): the miss of
// such a region may be merged and bridged, which remote rights never are.
constexpr int kLocalAccess = 1;

// kMaxRanges one-page ranges with a page gap between them (so nothing merges).
char* Arena() {
  static char* arena = [] {
    void* p = mmap(nullptr, 2 * kMaxRanges * kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("micro_bench: mmap");
      std::abort();
    }
    return static_cast<char*>(p);
  }();
  return arena;
}
char* Range(size_t i) { return Arena() + 2 * i * kPage; }

// Random hits: kMaxSpread one-page ranges 64 KiB apart, gets at +64.
constexpr size_t kSpacing = 64 * 1024;
constexpr size_t kMaxSpread = 1000000;

// kMaxSpread slots kSpacing apart, reserved (not committed) once.
char* SpreadArena() {
  static char* arena = [] {
    void* p = mmap(nullptr, kMaxSpread * kSpacing, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("micro_bench: mmap of the spread arena");
      std::abort();
    }
    return static_cast<char*>(p);
  }();
  return arena;
}
char* Spot(size_t i) { return SpreadArena() + i * kSpacing + 64; }

// The monitor of the default configuration (mrcache::Config's, i.e. `auto`).
const std::string& DefaultMonitor() {
  static const std::string* name = new std::string(mrcache::Config().monitor);
  return *name;
}

mrcache::Config ZeroCostConfig(size_t max_regions, const std::string& monitor = "none") {
  mrcache::Config config;
  config.registrar = "sim";
  config.sim_base_ns = 0;
  config.sim_page_ns = 0;
  config.monitor = monitor;
  config.max_regions = max_regions;
  return config;
}

std::unique_ptr<mrcache::Cache> MakeCache(size_t max_regions, const std::string& monitor = "none") {
  mrcache::Config config = ZeroCostConfig(max_regions, monitor);
  auto cache = mrcache::Cache::Create(config, mrcache::MakeSimRegistrar(config));
  if (!cache.ok()) {
    std::fprintf(stderr, "micro_bench: %s\n", cache.status().ToString().c_str());
    std::abort();
  }
  return std::move(*cache);
}

// A UCX rcache over a zero-cost sim registrar (both kept alive together).
struct Ucx {
  std::unique_ptr<mrcache::Registrar> registrar;
  std::unique_ptr<UcxRcache> cache;
};

// A UCX rcache of `max_regions` (0 = unlimited) over `registrar`, which the
// caller keeps alive, for requests with `access`.
absl::StatusOr<std::unique_ptr<UcxRcache>> CreateUcx(mrcache::Registrar& registrar,
                                                     size_t max_regions, int access = kAccess) {
  auto api = LoadUcsWithoutHooks();
  if (!api.ok()) return api.status();
  return UcxRcache::Create(**api, registrar, max_regions, 0, access);
}

Ucx MakeUcx(size_t max_regions, int access = kAccess) {
  Ucx ucx;
  ucx.registrar = mrcache::MakeSimRegistrar(ZeroCostConfig(max_regions));
  auto cache = CreateUcx(*ucx.registrar, max_regions, access);
  if (!cache.ok()) {
    std::fprintf(stderr, "micro_bench: %s\n", cache.status().ToString().c_str());
    std::abort();
  }
  ucx.cache = std::move(*cache);
  return ucx;
}

// Keys for any range, and nothing else: no system call, no lock, no map. The
// miss benchmarks over it measure what each cache adds to a registration.
class NullRegistrar : public mrcache::Registrar {
 public:
  const char* name() const override { return "null"; }
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override {
    mrcache::Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = ++next_;
    reg.lkey = reg.rkey = static_cast<uint32_t>(reg.handle);
    return reg;
  }
  absl::Status Deregister(const mrcache::Registration&) override { return absl::OkStatus(); }
  absl::Status DeviceWrite(const mrcache::Registration&, size_t, const void*, size_t) override {
    return absl::UnimplementedError("null registrar: no device");
  }
  bool pins_memory() const override { return false; }

 private:
  uint64_t next_ = 0;  // one thread per benchmark
};

// Nanoseconds in `ticks` of the TSC, at a rate measured against steady_clock
// over 20 ms on first use (mrcache/core/tick_rate.h).
double TscTicksToNs(double ticks) {
  static const double ns_per_tick = mrcache::MeasureNsPerTick(
      [] { return uint64_t{__rdtsc()}; },
      [] {
        return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count());
      },
      20'000'000, 5);
  return ticks * ns_per_tick;
}

// The sim registrar's mapping check alone (one mincore over the range, as
// CheckMapped makes it), timed with the TSC around the system call itself: how
// long the kernel takes inside each cache's miss. Keys as NullRegistrar.
class SyscallTimingRegistrar final : public NullRegistrar {
 public:
  const char* name() const override { return "syscall-timing"; }
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override {
    unsigned char vec[16];  // one byte per page: the benchmarks register one page
    if (length > sizeof(vec) * kPage) return absl::InvalidArgumentError("more than 16 pages");
    const uint64_t t0 = __rdtsc();
    const int rc = mincore(addr, length, vec);
    ticks_ += __rdtsc() - t0;
    ++calls_;
    if (rc != 0) return absl::InvalidArgumentError("mincore failed: not mapped");
    return NullRegistrar::Register(addr, length, access);
  }
  // Nanoseconds per timed system call so far.
  double SyscallNs() const { return calls_ == 0 ? 0 : TscTicksToNs(ticks_) / double(calls_); }

 private:
  uint64_t ticks_ = 0, calls_ = 0;
};

// The zero-cost sim registrar of the miss benchmarks, with the TSC read as
// each Register call enters and returns: BM_*MissPhases split each cache's
// miss at the registrar call.
class PhaseTimingRegistrar final : public mrcache::Registrar {
 public:
  PhaseTimingRegistrar() : sim_(mrcache::MakeSimRegistrar(ZeroCostConfig(0))) {}
  const char* name() const override { return "phase-timing"; }
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override {
    entered_ = __rdtsc();
    absl::StatusOr<mrcache::Registration> reg = sim_->Register(addr, length, access);
    returned_ = __rdtsc();
    ++calls_;
    return reg;
  }
  absl::Status Deregister(const mrcache::Registration& reg) override {
    return sim_->Deregister(reg);
  }
  absl::Status DeviceWrite(const mrcache::Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    return sim_->DeviceWrite(reg, offset, src, length);
  }
  bool pins_memory() const override { return sim_->pins_memory(); }
  // TSC at the entry and the return of the latest Register, and the calls.
  uint64_t entered() const { return entered_; }
  uint64_t returned() const { return returned_; }
  uint64_t calls() const { return calls_; }

 private:
  std::unique_ptr<mrcache::Registrar> sim_;
  uint64_t entered_ = 0, returned_ = 0, calls_ = 0;
};

// ---- hits: one shared cache per region count, filled before timing ----------
std::unique_ptr<mrcache::Cache> g_cache;
Ucx g_ucx;

// Caches range(0) regions, the i-th at at(i).
void FillMrcache(const benchmark::State& state, const std::string& monitor,
                 char* (*at)(size_t) = Range) {
  g_cache = MakeCache(0, monitor);
  for (int64_t i = 0; i < state.range(0); ++i) {
    auto region = g_cache->Acquire(at(i), kPage, kAccess);
    if (!region.ok() || !g_cache->Put(*region).ok()) std::abort();
  }
}
void SetUpMrcacheHit(const benchmark::State& state) { FillMrcache(state, "none"); }
void SetUpMrcacheHitDefaultMonitor(const benchmark::State& state) {
  FillMrcache(state, DefaultMonitor());
}
void TearDownMrcache(const benchmark::State&) { g_cache.reset(); }

void BM_MrcacheHit(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  size_t i = static_cast<size_t>(state.thread_index()) * 7 % n;
  mrcache::Cache& cache = *g_cache;
  for (auto _ : state) {
    absl::StatusOr<mrcache::Region*> region = cache.Acquire(Range(i), kPage, kAccess);
    benchmark::DoNotOptimize(region);
    (void)cache.Put(*region);
    if (++i == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) state.counters["misses"] = double(cache.stats().misses);
}
void BM_MrcacheHitDefaultMonitor(benchmark::State& state) { BM_MrcacheHit(state); }

void FillUcx(const benchmark::State& state, char* (*at)(size_t)) {
  g_ucx = MakeUcx(0);
  const UcsApi& api = g_ucx.cache->api();
  for (int64_t i = 0; i < state.range(0); ++i) {
    ucs_rcache_region_t* region;
    if (api.rcache_get(g_ucx.cache->rcache(), at(i), kPage, UcxRcache::Prot(), nullptr, &region) !=
        UCS_OK) {
      std::abort();
    }
    api.rcache_region_put(g_ucx.cache->rcache(), region);
  }
}
void SetUpUcxHit(const benchmark::State& state) { FillUcx(state, Range); }
void TearDownUcx(const benchmark::State&) {
  g_ucx.cache.reset();
  g_ucx.registrar.reset();
}

void BM_UcxHit(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  size_t i = static_cast<size_t>(state.thread_index()) * 7 % n;
  const UcsApi& api = g_ucx.cache->api();
  ucs_rcache_t* rcache = g_ucx.cache->rcache();
  for (auto _ : state) {
    ucs_rcache_region_t* region;
    ucs_status_t status =
        api.rcache_get(rcache, Range(i), kPage, UcxRcache::Prot(), nullptr, &region);
    benchmark::DoNotOptimize(status);
    api.rcache_region_put(rcache, region);
    if (++i == n) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

// ---- misses: 4,096 ranges through kMissRegions regions: every get misses ------
// Below the admission threshold (64): every miss is cached, evicting one region.
constexpr size_t kMissRegions = 63;
// Gets and puts the page at `addr` through `cache`; false if the get failed.
bool MrcacheGetPut(mrcache::Cache& cache, char* addr, int access = kAccess) {
  absl::StatusOr<mrcache::Region*> region = cache.Acquire(addr, kPage, access);
  if (!region.ok()) return false;
  (void)cache.Put(*region);
  return true;
}
void MissLoop(benchmark::State& state, mrcache::Cache& cache, int access = kAccess) {
  size_t i = 0;
  for (auto _ : state) {
    if (!MrcacheGetPut(cache, Range(i), access)) {
      state.SkipWithError("acquire failed");
      break;
    }
    if (++i == kMaxRanges) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["hits"] = double(cache.stats().hits);
}
void MrcacheMiss(benchmark::State& state, const std::string& monitor) {
  std::unique_ptr<mrcache::Cache> cache = MakeCache(kMissRegions, monitor);
  MissLoop(state, *cache);
}
void BM_MrcacheMiss(benchmark::State& state) { MrcacheMiss(state, "none"); }
void BM_MrcacheMissNotAdmitted(benchmark::State& state) {
  std::unique_ptr<mrcache::Cache> cache = MakeCache(kMissRegions + 1);
  MissLoop(state, *cache);
  state.counters["bypassed"] = double(cache->stats().bypassed);
}
void BM_MrcacheMissDefaultMonitor(benchmark::State& state) { MrcacheMiss(state, DefaultMonitor()); }
void BM_MrcacheMissLocalAccess(benchmark::State& state) {
  std::unique_ptr<mrcache::Cache> cache = MakeCache(kMissRegions, DefaultMonitor());
  MissLoop(state, *cache, kLocalAccess);
}
// A kMissRegions cache of the default configuration over `registrar`; on
// error the benchmark is skipped and nullptr returned.
std::unique_ptr<mrcache::Cache> MissCacheOver(benchmark::State& state,
                                              std::unique_ptr<mrcache::Registrar> registrar) {
  auto made =
      mrcache::Cache::Create(ZeroCostConfig(kMissRegions, DefaultMonitor()), std::move(registrar));
  if (!made.ok()) {
    state.SkipWithError("cache creation failed");
    return nullptr;
  }
  return std::move(*made);
}
// The same for UCX: a kMissRegions rcache over `registrar`, which the caller
// keeps alive.
std::unique_ptr<UcxRcache> UcxMissCacheOver(benchmark::State& state,
                                            mrcache::Registrar& registrar) {
  auto made = CreateUcx(registrar, kMissRegions);
  if (!made.ok()) {
    state.SkipWithError("ucs_rcache creation failed");
    return nullptr;
  }
  return std::move(*made);
}
void BM_MrcacheMissNullRegistrar(benchmark::State& state) {
  std::unique_ptr<mrcache::Cache> cache = MissCacheOver(state, std::make_unique<NullRegistrar>());
  if (cache != nullptr) MissLoop(state, *cache);
}

// Gets and puts the page at `addr` through `cache`; false if the get failed.
bool UcxGetPut(UcxRcache& cache, char* addr) {
  const UcsApi& api = cache.api();
  ucs_rcache_region_t* region;
  if (api.rcache_get(cache.rcache(), addr, kPage, UcxRcache::Prot(), nullptr, &region) != UCS_OK) {
    return false;
  }
  api.rcache_region_put(cache.rcache(), region);
  return true;
}
void UcxMissLoop(benchmark::State& state, UcxRcache& cache) {
  size_t i = 0;
  for (auto _ : state) {
    if (!UcxGetPut(cache, Range(i))) {
      state.SkipWithError("ucs_rcache_get failed");
      break;
    }
    if (++i == kMaxRanges) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_UcxMiss(benchmark::State& state) {
  Ucx ucx = MakeUcx(kMissRegions);
  UcxMissLoop(state, *ucx.cache);
}
void BM_UcxMissLocalAccess(benchmark::State& state) {
  Ucx ucx = MakeUcx(kMissRegions, kLocalAccess);
  UcxMissLoop(state, *ucx.cache);
}
void BM_UcxMissNullRegistrar(benchmark::State& state) {
  NullRegistrar registrar;
  std::unique_ptr<UcxRcache> cache = UcxMissCacheOver(state, registrar);
  if (cache != nullptr) UcxMissLoop(state, *cache);
}

// The miss over SyscallTimingRegistrar: `syscall_ns` is the registrar's
// system call alone, the rest of the time each cache's own work around it.
void BM_MrcacheMissSyscallTiming(benchmark::State& state) {
  auto registrar = std::make_unique<SyscallTimingRegistrar>();
  const SyscallTimingRegistrar& timing = *registrar;
  std::unique_ptr<mrcache::Cache> cache = MissCacheOver(state, std::move(registrar));
  if (cache == nullptr) return;
  MissLoop(state, *cache);
  state.counters["syscall_ns"] = timing.SyscallNs();
}
void BM_UcxMissSyscallTiming(benchmark::State& state) {
  SyscallTimingRegistrar registrar;
  std::unique_ptr<UcxRcache> cache = UcxMissCacheOver(state, registrar);
  if (cache == nullptr) return;
  UcxMissLoop(state, *cache);
  state.counters["syscall_ns"] = registrar.SyscallNs();
}

// The miss in four phases, each cache over its own PhaseTimingRegistrar:
// from the get to the registrar call, the registrar call (the sim
// registrar's checks, its mincore and its table), from its return to the
// get's, and the put. `get(addr)` gets and keeps the region, false on error;
// `put()` puts it. Every get must miss (each calls the registrar once).
template <typename Get, typename Put>
void MissPhasesLoop(benchmark::State& state, const PhaseTimingRegistrar& timing, Get get, Put put) {
  uint64_t before = 0, call = 0, after = 0, putting = 0, gets = 0;
  const uint64_t calls_before = timing.calls();
  size_t i = 0;
  for (auto _ : state) {
    const uint64_t t0 = __rdtsc();
    if (!get(Range(i))) {
      state.SkipWithError("get failed");
      return;
    }
    const uint64_t t1 = __rdtsc();
    put();
    const uint64_t t2 = __rdtsc();
    before += timing.entered() - t0;
    call += timing.returned() - timing.entered();
    after += t1 - timing.returned();
    putting += t2 - t1;
    ++gets;
    if (++i == kMaxRanges) i = 0;
  }
  if (timing.calls() - calls_before != gets) {
    state.SkipWithError("a get did not call the registrar: the phases would be wrong");
    return;
  }
  const double n = gets == 0 ? 1 : double(gets);
  state.counters["before_registrar_ns"] = TscTicksToNs(before) / n;
  state.counters["registrar_ns"] = TscTicksToNs(call) / n;
  state.counters["after_registrar_ns"] = TscTicksToNs(after) / n;
  state.counters["put_ns"] = TscTicksToNs(putting) / n;
}
void BM_MrcacheMissPhases(benchmark::State& state) {
  auto registrar = std::make_unique<PhaseTimingRegistrar>();
  const PhaseTimingRegistrar& timing = *registrar;
  std::unique_ptr<mrcache::Cache> cache = MissCacheOver(state, std::move(registrar));
  if (cache == nullptr) return;
  mrcache::Region* region = nullptr;
  MissPhasesLoop(
      state, timing,
      [&](char* addr) {
        absl::StatusOr<mrcache::Region*> got = cache->Acquire(addr, kPage, kAccess);
        region = got.ok() ? *got : nullptr;
        return got.ok();
      },
      [&] { (void)cache->Put(region); });
}
void BM_UcxMissPhases(benchmark::State& state) {
  PhaseTimingRegistrar registrar;
  std::unique_ptr<UcxRcache> cache = UcxMissCacheOver(state, registrar);
  if (cache == nullptr) return;
  const UcsApi& ucs = cache->api();
  ucs_rcache_region_t* region = nullptr;
  MissPhasesLoop(
      state, registrar,
      [&](char* addr) {
        return ucs.rcache_get(cache->rcache(), addr, kPage, UcxRcache::Prot(), nullptr, &region) ==
               UCS_OK;
      },
      [&] { ucs.rcache_region_put(cache->rcache(), region); });
}

// ---- the miss, mrcache's and UCX's interleaved --------------------------------------
constexpr int kPairBlock = 32;

// The median of `values` (reordered); 0 if empty.
double Median(std::vector<double>* values) {
  if (values->empty()) return 0;
  auto middle = values->begin() + static_cast<std::ptrdiff_t>(values->size() / 2);
  std::nth_element(values->begin(), middle, values->end());
  return *middle;
}

// Each iteration runs one block of kPairBlock misses through each cache,
// mrcache's first in even iterations and UCX's first in odd ones (so that
// neither always follows the other). `mrcache_block(first)` and
// `ucx_block(first)` each get and put the kPairBlock ranges from
// Range(first) on, false on error; both caches walk the same ranges.
template <typename MrcacheBlock, typename UcxBlock>
void MissPairLoop(benchmark::State& state, MrcacheBlock mrcache_block, UcxBlock ucx_block) {
  std::vector<double> mrcache_ticks, ucx_ticks, ratios;
  size_t first = 0;
  bool mrcache_first = true;
  for (auto _ : state) {
    uint64_t mrcache_took = 0, ucx_took = 0;
    for (int half = 0; half < 2; ++half) {
      const bool mrcache_now = (half == 0) == mrcache_first;
      const uint64_t t0 = __rdtsc();
      const bool ok = mrcache_now ? mrcache_block(first) : ucx_block(first);
      const uint64_t took = __rdtsc() - t0;
      if (!ok) {
        state.SkipWithError("a get failed");
        return;
      }
      (mrcache_now ? mrcache_took : ucx_took) = took;
    }
    mrcache_ticks.push_back(double(mrcache_took));
    ucx_ticks.push_back(double(ucx_took));
    ratios.push_back(double(mrcache_took) / double(ucx_took == 0 ? 1 : ucx_took));
    mrcache_first = !mrcache_first;
    first = (first + kPairBlock) % kMaxRanges;
  }
  state.SetItemsProcessed(state.iterations() * 2 * kPairBlock);
  state.counters["mrcache_ns"] = TscTicksToNs(Median(&mrcache_ticks)) / kPairBlock;
  state.counters["ucx_ns"] = TscTicksToNs(Median(&ucx_ticks)) / kPairBlock;
  state.counters["ratio"] = Median(&ratios);
}

// MissPairLoop over a kMissRegions mrcache cache of the default configuration
// and a kMissRegions UCX rcache, each over its own registrar.
void MissPair(benchmark::State& state, std::unique_ptr<mrcache::Registrar> mrcache_registrar,
              std::unique_ptr<mrcache::Registrar> ucx_registrar) {
  std::unique_ptr<mrcache::Cache> cache = MissCacheOver(state, std::move(mrcache_registrar));
  std::unique_ptr<UcxRcache> ucx = UcxMissCacheOver(state, *ucx_registrar);
  if (cache == nullptr || ucx == nullptr) return;
  MissPairLoop(
      state,
      [&](size_t first) {
        for (size_t k = first; k < first + kPairBlock; ++k) {
          if (!MrcacheGetPut(*cache, Range(k))) return false;
        }
        return true;
      },
      [&](size_t first) {
        for (size_t k = first; k < first + kPairBlock; ++k) {
          if (!UcxGetPut(*ucx, Range(k))) return false;
        }
        return true;
      });
  if (cache->stats().hits != 0) state.SkipWithError("a get hit: the blocks must only miss");
}
void BM_MissPairDefaultMonitor(benchmark::State& state) {
  MissPair(state, mrcache::MakeSimRegistrar(ZeroCostConfig(0)),
           mrcache::MakeSimRegistrar(ZeroCostConfig(0)));
}
void BM_MissPairNullRegistrar(benchmark::State& state) {
  MissPair(state, std::make_unique<NullRegistrar>(), std::make_unique<NullRegistrar>());
}

// ---- invalidation drain --------------------------------------------------------
void BM_MrcacheMissAfterInvalidate(benchmark::State& state) {
  std::unique_ptr<mrcache::Cache> cache = MakeCache(64);
  size_t i = 0;
  for (auto _ : state) {
    (void)cache->Invalidate(Range(i), kPage);
    absl::StatusOr<mrcache::Region*> region = cache->Acquire(Range(i), kPage, kAccess);
    if (!region.ok()) {
      state.SkipWithError("acquire failed");
      break;
    }
    (void)cache->Put(*region);
    if (++i == 16) i = 0;  // a working set that fits: only invalidation makes it miss
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["hits"] = double(cache->stats().hits);
}

// ---- the first miss beside a region (bridging probe) ------------------------------
// A fresh cache with monitor=patch (bridging on) holds a region at page 0 of a
// mapping; the timed get is of page 64, whose gap to page 0 was never touched,
// so bridging cannot pay. Compare with BM_MrcacheMiss: what the probe adds.
void BM_MrcacheFirstMissBesideARegion(benchmark::State& state) {
  constexpr size_t kSpan = 256 * kPage;
  for (auto _ : state) {
    mrcache::Config config = ZeroCostConfig(0);
    config.monitor = "patch";
    auto made = mrcache::Cache::Create(config, mrcache::MakeSimRegistrar(config));
    char* area = static_cast<char*>(
        mmap(nullptr, kSpan, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (!made.ok() || area == MAP_FAILED) {
      state.SkipWithError("cache or mapping failed");
      break;
    }
    std::unique_ptr<mrcache::Cache> cache = std::move(*made);
    area[0] = 1;
    area[64 * kPage] = 1;
    auto first = cache->Acquire(area, kPage, kAccess);
    const auto t0 = std::chrono::steady_clock::now();
    auto second = cache->Acquire(area + 64 * kPage, kPage, kAccess);
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (!first.ok() || !second.ok()) {
      state.SkipWithError("acquire failed");
      break;
    }
    (void)cache->Put(*first);
    (void)cache->Put(*second);
    cache.reset();
    munmap(area, kSpan);
  }
  state.SetItemsProcessed(state.iterations());
}

// A cheap pseudo-random index in [0, n): the same sequence for both caches.
struct RandomIndex {
  uint64_t x;
  explicit RandomIndex(uint64_t seed) : x(seed * 0x9e3779b97f4a7c15ull + 1) {}
  size_t Next(size_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>((uint64_t{static_cast<uint32_t>(x >> 32)} * n) >> 32);
  }
};

// Gets before the timed loop, on every thread, for both caches: Google
// Benchmark runs every thread but the first on a new thread each time it
// calls the benchmark, and a new thread's lookup table grows to the working
// set over its first gets (thread_cache.h); the cache-wide covering hints
// (covering_hints.h) answer a region once it was looked up since the last
// removal from the index. The steady state -- every region got about twice
// -- is what is timed; the warm-up is the same untimed work for UCX.
size_t RandomWarmUpGets(size_t n) { return n * 2; }

void SetUpMrcacheRandomHit(const benchmark::State& state) { FillMrcache(state, "none", Spot); }

void BM_MrcacheRandomHit(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  RandomIndex random(static_cast<uint64_t>(state.thread_index()) + 1);
  mrcache::Cache& cache = *g_cache;
  for (size_t i = RandomWarmUpGets(n); i > 0; --i) {
    absl::StatusOr<mrcache::Region*> region = cache.Acquire(Spot(random.Next(n)), kPage, kAccess);
    if (region.ok()) (void)cache.Put(*region);
  }
  for (auto _ : state) {
    absl::StatusOr<mrcache::Region*> region = cache.Acquire(Spot(random.Next(n)), kPage, kAccess);
    benchmark::DoNotOptimize(region);
    (void)cache.Put(*region);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) state.counters["misses"] = double(cache.stats().misses);
}

void SetUpUcxRandomHit(const benchmark::State& state) { FillUcx(state, Spot); }

void BM_UcxRandomHit(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  RandomIndex random(static_cast<uint64_t>(state.thread_index()) + 1);
  const UcsApi& api = g_ucx.cache->api();
  ucs_rcache_t* rcache = g_ucx.cache->rcache();
  for (size_t i = RandomWarmUpGets(n); i > 0; --i) {
    ucs_rcache_region_t* region;
    if (api.rcache_get(rcache, Spot(random.Next(n)), kPage, UcxRcache::Prot(), nullptr, &region) ==
        UCS_OK) {
      api.rcache_region_put(rcache, region);
    }
  }
  for (auto _ : state) {
    ucs_rcache_region_t* region;
    ucs_status_t status =
        api.rcache_get(rcache, Spot(random.Next(n)), kPage, UcxRcache::Prot(), nullptr, &region);
    benchmark::DoNotOptimize(status);
    api.rcache_region_put(rcache, region);
  }
  state.SetItemsProcessed(state.iterations());
}

// ---- hits while another thread releases unrelated memory ------------------------
// The churner: maps, touches and unmaps 4 KiB, `per_ms` times per millisecond
// (0: as fast as it can), reporting each release to UCX if `ucx` is set.
// With `use`, it calls use(page) before each unmap (a get and put of the
// page, so that the unmap invalidates a cached region). With touch = false
// it never writes the page: the unmap then needs no TLB shootdown of the
// other threads' CPUs, which on a VM caps the touching churner below 100
// releases per ms whenever another thread of the process runs.
class Churner {
 public:
  void Start(int per_ms, const UcsApi* ucx, void (*use)(char*) = nullptr, bool touch = true) {
    stop_ = false;
    releases_ = 0;
    thread_ = std::thread([this, per_ms, ucx, use, touch] {
      timespec next;
      clock_gettime(CLOCK_MONOTONIC, &next);
      while (!stop_.load(std::memory_order_relaxed)) {
        void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) continue;
        if (touch) static_cast<char*>(p)[0] = 1;
        if (use != nullptr) use(static_cast<char*>(p));
        munmap(p, kPage);
        if (ucx != nullptr) ucx->vm_munmap(p, kPage);
        releases_.fetch_add(1, std::memory_order_relaxed);
        if (per_ms == 0) continue;
        next.tv_nsec += 1000000 / per_ms;
        if (next.tv_nsec >= 1000000000) {
          next.tv_nsec -= 1000000000;
          ++next.tv_sec;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t releases() const { return releases_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> releases_{0};
  std::thread thread_;
};
Churner g_churner;

// Thread 0 measures the churner's rate over the timed loop.
class ChurnRate {
 public:
  explicit ChurnRate(const benchmark::State& state)
      : on_(state.thread_index() == 0),
        releases_(g_churner.releases()),
        t0_(std::chrono::steady_clock::now()) {}
  void Report(benchmark::State& state) const {
    if (!on_) return;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    state.counters["releases_per_ms"] = ms > 0 ? double(g_churner.releases() - releases_) / ms : 0;
  }

 private:
  bool on_;
  uint64_t releases_;
  std::chrono::steady_clock::time_point t0_;
};

void SetUpMrcacheHitUnderChurn(const benchmark::State& state) {
  FillMrcache(state, DefaultMonitor());
  g_churner.Start(static_cast<int>(state.range(1)), nullptr);
}
void TearDownMrcacheHitUnderChurn(const benchmark::State& state) {
  g_churner.Stop();
  TearDownMrcache(state);
}
void SetUpUcxHitUnderChurn(const benchmark::State& state) {
  SetUpUcxHit(state);
  g_churner.Start(static_cast<int>(state.range(1)), &g_ucx.cache->api());
}
void TearDownUcxHitUnderChurn(const benchmark::State& state) {
  g_churner.Stop();
  TearDownUcx(state);
}
void SetUpMrcacheHitUnderMunmapStorm(const benchmark::State& state) {
  FillMrcache(state, DefaultMonitor());
  g_churner.Start(0, nullptr, nullptr, /*touch=*/false);
}
void SetUpUcxHitUnderMunmapStorm(const benchmark::State& state) {
  SetUpUcxHit(state);
  g_churner.Start(0, &g_ucx.cache->api(), nullptr, /*touch=*/false);
}

// Runs `body` and reports the churner's rate over it.
void WithChurnRate(benchmark::State& state, void (*body)(benchmark::State&)) {
  ChurnRate rate(state);
  body(state);
  rate.Report(state);
}

// range(0) is the working set (regions), range(1) the churn rate.
void BM_MrcacheHitUnderChurn(benchmark::State& state) { WithChurnRate(state, BM_MrcacheHit); }
void BM_UcxHitUnderChurn(benchmark::State& state) { WithChurnRate(state, BM_UcxHit); }
void BM_MrcacheHitUnderMunmapStorm(benchmark::State& state) { WithChurnRate(state, BM_MrcacheHit); }
void BM_UcxHitUnderMunmapStorm(benchmark::State& state) { WithChurnRate(state, BM_UcxHit); }

// ---- random hits while another thread's cached regions come and go ------------
// The random hits above, over range(0) regions, while the churner gets, puts
// and unmaps a page of its own range(1) times per ms (0: as fast as it can):
// each unmap invalidates a region of the same cache, unrelated to the hits.
// mrcache runs the default monitor; UCX gets every release reported.
void ChurnerGetsFromMrcache(char* page) {
  absl::StatusOr<mrcache::Region*> region = g_cache->Acquire(page, kPage, kAccess);
  if (region.ok()) (void)g_cache->Put(*region);
}
void ChurnerGetsFromUcx(char* page) {
  const UcsApi& api = g_ucx.cache->api();
  ucs_rcache_region_t* region;
  if (api.rcache_get(g_ucx.cache->rcache(), page, kPage, UcxRcache::Prot(), nullptr, &region) ==
      UCS_OK) {
    api.rcache_region_put(g_ucx.cache->rcache(), region);
  }
}
void SetUpMrcacheRandomHitUnderRegionChurn(const benchmark::State& state) {
  FillMrcache(state, DefaultMonitor(), Spot);
  g_churner.Start(static_cast<int>(state.range(1)), nullptr, ChurnerGetsFromMrcache);
}
void SetUpUcxRandomHitUnderRegionChurn(const benchmark::State& state) {
  FillUcx(state, Spot);
  g_churner.Start(static_cast<int>(state.range(1)), &g_ucx.cache->api(), ChurnerGetsFromUcx);
}
void BM_MrcacheRandomHitUnderRegionChurn(benchmark::State& state) {
  WithChurnRate(state, BM_MrcacheRandomHit);
}
void BM_UcxRandomHitUnderRegionChurn(benchmark::State& state) {
  WithChurnRate(state, BM_UcxRandomHit);
}

void RandomHitArgs(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(10000)->Arg(100000)->Arg(1000000)->Threads(1)->Threads(2)->UseRealTime();
}
void ChurnArgs(benchmark::internal::Benchmark* b) {
  b->Args({64, 1})->Args({64, 10})->Args({64, 0})->Threads(1)->Threads(2)->UseRealTime();
}

void RegionChurnArgs(benchmark::internal::Benchmark* b) {
  b->Args({10000, 10})->Args({100000, 10})->Args({100000, 0})->Threads(1)->Threads(2);
  b->UseRealTime();
}

void HitArgs(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(4096)->Threads(1)->Threads(2)->UseRealTime();
}

BENCHMARK(BM_MrcacheHit)->Apply(HitArgs)->Setup(SetUpMrcacheHit)->Teardown(TearDownMrcache);
BENCHMARK(BM_MrcacheHitDefaultMonitor)
    ->Apply(HitArgs)
    ->Setup(SetUpMrcacheHitDefaultMonitor)
    ->Teardown(TearDownMrcache);
BENCHMARK(BM_UcxHit)->Apply(HitArgs)->Setup(SetUpUcxHit)->Teardown(TearDownUcx);
BENCHMARK(BM_MrcacheRandomHit)
    ->Apply(RandomHitArgs)
    ->Setup(SetUpMrcacheRandomHit)
    ->Teardown(TearDownMrcache);
BENCHMARK(BM_UcxRandomHit)->Apply(RandomHitArgs)->Setup(SetUpUcxRandomHit)->Teardown(TearDownUcx);
BENCHMARK(BM_MrcacheHitUnderChurn)
    ->Apply(ChurnArgs)
    ->Setup(SetUpMrcacheHitUnderChurn)
    ->Teardown(TearDownMrcacheHitUnderChurn);
BENCHMARK(BM_UcxHitUnderChurn)
    ->Apply(ChurnArgs)
    ->Setup(SetUpUcxHitUnderChurn)
    ->Teardown(TearDownUcxHitUnderChurn);
BENCHMARK(BM_MrcacheHitUnderMunmapStorm)
    ->Apply(HitArgs)
    ->Setup(SetUpMrcacheHitUnderMunmapStorm)
    ->Teardown(TearDownMrcacheHitUnderChurn);
BENCHMARK(BM_UcxHitUnderMunmapStorm)
    ->Apply(HitArgs)
    ->Setup(SetUpUcxHitUnderMunmapStorm)
    ->Teardown(TearDownUcxHitUnderChurn);
BENCHMARK(BM_MrcacheRandomHitUnderRegionChurn)
    ->Apply(RegionChurnArgs)
    ->Setup(SetUpMrcacheRandomHitUnderRegionChurn)
    ->Teardown(TearDownMrcacheHitUnderChurn);
BENCHMARK(BM_UcxRandomHitUnderRegionChurn)
    ->Apply(RegionChurnArgs)
    ->Setup(SetUpUcxRandomHitUnderRegionChurn)
    ->Teardown(TearDownUcxHitUnderChurn);
BENCHMARK(BM_MrcacheMiss);
BENCHMARK(BM_MrcacheMissNotAdmitted);
BENCHMARK(BM_MrcacheMissDefaultMonitor);
BENCHMARK(BM_UcxMiss);
BENCHMARK(BM_MrcacheMissLocalAccess);
BENCHMARK(BM_UcxMissLocalAccess);
BENCHMARK(BM_MrcacheMissNullRegistrar);
BENCHMARK(BM_UcxMissNullRegistrar);
BENCHMARK(BM_MrcacheMissSyscallTiming);
BENCHMARK(BM_UcxMissSyscallTiming);
BENCHMARK(BM_MrcacheMissPhases);
BENCHMARK(BM_UcxMissPhases);
BENCHMARK(BM_MissPairDefaultMonitor);
BENCHMARK(BM_MissPairNullRegistrar);
BENCHMARK(BM_MrcacheMissAfterInvalidate);
BENCHMARK(BM_MrcacheFirstMissBesideARegion)->UseManualTime();

}  // namespace
}  // namespace mrbench

int main(int argc, char** argv) {
  // Before anything can load libucs: sets UCX_MEM_MMAP_HOOK_MODE=none, loads
  // it and checks that UCM reads the hook mode as none.
  absl::StatusOr<const mrbench::UcsApi*> api = mrbench::LoadUcsWithoutHooks();
  if (!api.ok()) {
    std::fprintf(stderr, "micro_bench: %s\n", api.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "micro_bench: UCX loaded with mmap_hook_mode=%d (0 = none)\n",
               static_cast<int>((*api)->ucm_opts->mmap_hook_mode));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
