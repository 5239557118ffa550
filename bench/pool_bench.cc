// pool_bench: what a pre-registered buffer costs.
//
// Per size (64 B, 4 KiB, 64 KiB), one alloc + free of:
//   BM_PoolAllocFree          the pool, with keys (per-thread magazine + private tcache)
//   BM_PoolAllocFreeNoTcache  the pool, MALLOCX_TCACHE_NONE (arena lock per call)
//   BM_MallocFree             glibc malloc + free (the target: pool <= 2x this)
//   BM_MallocRegisterDeregister  malloc + Register + Deregister through the
//                             uring registrar: what a runtime without a pool pays
//   BM_PoolOverMalloc         the pool and malloc in one benchmark, batches of
//                             256 alloc+free of each taken in turn by every
//                             thread: counters pool_ns and malloc_ns (per
//                             alloc+free) and ratio = pool_ns / malloc_ns, at
//                             64 B, 4 KiB, 16 KiB, 64 KiB and 1 MiB, with 1
//                             and 2 threads (the targets: ratio <= 1.5 with
//                             one thread, <= 2 with two)
//   BM_PoolOverMallocBatch    the same with 256 buffers live at once, freed
//                             in allocation order: past the per-thread
//                             caches, through jemalloc's arena and the
//                             pool's extent hooks
// Ratios come from the same run: compare the rows of one size. Multi-threaded
// rows (->Threads(4)) show that per-thread caches keep the pool scalable.
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "allocator/pool.h"
#include "benchmark/benchmark.h"
#include "mrcache/config.h"
#include "mrcache/registrars/uring_registrar.h"

namespace mrcache {
namespace {

Registrar& UringRegistrar() {
  static Registrar* registrar = [] {
    absl::StatusOr<std::unique_ptr<Registrar>> r = MakeUringRegistrar(Config());
    if (!r.ok()) return static_cast<Registrar*>(nullptr);
    return r->release();
  }();
  return *registrar;
}

// One pool per tcache mode, shared by every thread of a benchmark, on the
// uring registrar: its chunks are really pinned.
Pool& SharedPool(bool thread_caches) {
  static Pool* pools[2] = {nullptr, nullptr};
  static std::once_flag once[2];
  std::call_once(once[thread_caches], [thread_caches] {
    PoolOptions options;
    options.thread_caches = thread_caches;
    absl::StatusOr<std::unique_ptr<Pool>> pool = Pool::Create(UringRegistrar(), Config(), options);
    if (!pool.ok()) std::abort();
    pools[thread_caches] = pool->release();
  });
  return *pools[thread_caches];
}

void PoolAllocFree(benchmark::State& state, bool thread_caches) {
  if (!UringAvailable()) {
    state.SkipWithError("io_uring is unavailable");
    return;
  }
  Pool& pool = SharedPool(thread_caches);
  const size_t size = static_cast<size_t>(state.range(0));
  RegionInfo keys;
  for (auto _ : state) {
    void* p = *pool.Alloc(size, &keys);
    benchmark::DoNotOptimize(p);
    benchmark::DoNotOptimize(keys.lkey);
    (void)pool.Free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PoolAllocFree(benchmark::State& state) { PoolAllocFree(state, true); }
void BM_PoolAllocFreeNoTcache(benchmark::State& state) { PoolAllocFree(state, false); }

void BM_MallocFree(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_MallocRegisterDeregister(benchmark::State& state) {
  if (!UringAvailable()) {
    state.SkipWithError("io_uring is unavailable");
    return;
  }
  Registrar& registrar = UringRegistrar();
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(size);
    absl::StatusOr<Registration> reg = registrar.Register(p, size, kAccessLocalWrite);
    if (!reg.ok()) {
      state.SkipWithError(std::string(reg.status().message()).c_str());
      std::free(p);
      break;
    }
    benchmark::DoNotOptimize(reg->lkey);
    (void)registrar.Deregister(*reg);
    std::free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

// CLOCK_THREAD_CPUTIME_ID as a std::chrono clock.
struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ThreadCpuClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(duration(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec));
  }
};

// Batches of kBatch alloc+free of `size`, pool then malloc, in the calling
// thread's CPU time. interleaved: each buffer freed at once (the per-thread
// caches serve it); else kBatch buffers live, then all freed in allocation
// order (the caches overflow: jemalloc's arena and the pool's extent hooks).
void PoolOverMalloc(benchmark::State& state, bool interleaved) {
  if (!UringAvailable()) {
    state.SkipWithError("io_uring is unavailable");
    return;
  }
  Pool& pool = SharedPool(true);
  const size_t size = static_cast<size_t>(state.range(0));
  constexpr int kBatch = 256;
  // The thread's CPU time: on a shared machine, time spent preempted would
  // fall on whichever half of the batch it interrupted.
  using Clock = ThreadCpuClock;
  Clock::duration pool_time{}, malloc_time{};
  RegionInfo keys;
  void* live[kBatch];
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      void* p = *pool.Alloc(size, &keys);
      benchmark::DoNotOptimize(p);
      benchmark::DoNotOptimize(keys.lkey);
      if (interleaved) {
        (void)pool.Free(p);
      } else {
        live[i] = p;
      }
    }
    if (!interleaved) {
      for (void* p : live) (void)pool.Free(p);
    }
    const Clock::time_point middle = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      void* p = std::malloc(size);
      benchmark::DoNotOptimize(p);
      if (interleaved) {
        std::free(p);
      } else {
        live[i] = p;
      }
    }
    if (!interleaved) {
      for (void* p : live) std::free(p);
    }
    pool_time += middle - start;
    malloc_time += Clock::now() - middle;
  }
  const double calls = static_cast<double>(state.iterations()) * kBatch;
  const double pool_ns = std::chrono::duration<double, std::nano>(pool_time).count() / calls;
  const double malloc_ns = std::chrono::duration<double, std::nano>(malloc_time).count() / calls;
  state.counters["pool_ns"] = benchmark::Counter(pool_ns, benchmark::Counter::kAvgThreads);
  state.counters["malloc_ns"] = benchmark::Counter(malloc_ns, benchmark::Counter::kAvgThreads);
  state.counters["ratio"] =
      benchmark::Counter(pool_ns / malloc_ns, benchmark::Counter::kAvgThreads);
}
void BM_PoolOverMalloc(benchmark::State& state) { PoolOverMalloc(state, true); }
void BM_PoolOverMallocBatch(benchmark::State& state) { PoolOverMalloc(state, false); }
#define POOL_OVER_MALLOC_ARGS \
  Arg(64)->Arg(4096)->Arg(16384)->Arg(65536)->Arg(1 << 20)->Threads(1)->Threads(2)
BENCHMARK(BM_PoolOverMalloc)->POOL_OVER_MALLOC_ARGS;
BENCHMARK(BM_PoolOverMallocBatch)->POOL_OVER_MALLOC_ARGS;

#define POOL_BENCH_SIZES Arg(64)->Arg(4096)->Arg(65536)
BENCHMARK(BM_PoolAllocFree)->POOL_BENCH_SIZES;
BENCHMARK(BM_PoolAllocFreeNoTcache)->POOL_BENCH_SIZES;
BENCHMARK(BM_MallocFree)->POOL_BENCH_SIZES;
BENCHMARK(BM_MallocRegisterDeregister)->POOL_BENCH_SIZES;
BENCHMARK(BM_PoolAllocFree)->POOL_BENCH_SIZES->Threads(4);
BENCHMARK(BM_PoolAllocFreeNoTcache)->POOL_BENCH_SIZES->Threads(4);
BENCHMARK(BM_MallocFree)->POOL_BENCH_SIZES->Threads(4);

}  // namespace
}  // namespace mrcache

BENCHMARK_MAIN();
