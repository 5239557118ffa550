// mrcache_driver.h: the `mrcache` and `mrcache-nomerge` configurations.
//
// A mrcache::Cache over the benchmark's registrar, with the benchmark's
// limits and otherwise its defaults, including the memory monitor (`auto`,
// or MRCACHE_MONITOR). Release calls Cache::Invalidate (the C API's
// mrc_invalidate) before every free, at the same points of the trace where
// the UCX peer gets its explicit invalidation, so mrcache sees every event
// UCX sees; its monitor adds the allocator's own unmaps and trims, which can
// only drop more regions. The monitor is what makes bridging safe (a bridged
// region covers memory no request named; see cache_impl.cc), so a run with
// MRCACHE_MONITOR=none measures mrcache without bridging.
#ifndef BENCH_MRCACHE_DRIVER_H_
#define BENCH_MRCACHE_DRIVER_H_

#include <memory>

#include "bench/replay.h"
#include "mrcache/cache.h"

namespace mrbench {

class MrcacheDriver : public Driver {
 public:
  // `config` already carries the limits.
  static absl::StatusOr<std::unique_ptr<MrcacheDriver>> Create(
      mrcache::Config config, std::unique_ptr<mrcache::Registrar> registrar);
  absl::StatusOr<Lease> Get(void* addr, size_t length, int access) override;
  absl::Status Put(const Lease& lease) override;
  absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src,
                           size_t length) override;
  absl::Status Release(void* addr, size_t length) override;
  absl::Status Finish() override;

  // Valid until Finish.
  mrcache::Cache& cache() { return *cache_; }

 private:
  explicit MrcacheDriver(std::unique_ptr<mrcache::Cache> cache) : cache_(std::move(cache)) {}
  std::unique_ptr<mrcache::Cache> cache_;
};

}  // namespace mrbench

#endif  // BENCH_MRCACHE_DRIVER_H_
