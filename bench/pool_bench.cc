// pool_bench: what a pre-registered buffer costs.
//
// Per size (64 B, 4 KiB, 64 KiB), one alloc + free of:
//   BM_PoolAllocFree          the pool, with keys (per-thread magazine + private tcache)
//   BM_PoolAllocFreeNoTcache  the pool, MALLOCX_TCACHE_NONE (arena lock per call)
//   BM_MallocFree             glibc malloc + free (the target: pool <= 2x this)
//   BM_MallocRegisterDeregister  malloc + Register + Deregister through the
//                             uring registrar: what a runtime without a pool pays
// Ratios come from the same run: compare the rows of one size. Multi-threaded
// rows (->Threads(4)) show that per-thread caches keep the pool scalable.
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
