// mrcache_driver.h: the `mrcache` and `mrcache-nomerge` configurations.
//
// A mrcache::Cache over the benchmark's registrar, with the benchmark's
// limits. The monitor is `none` and Release calls Cache::Invalidate (the C
// API's mrc_invalidate): both caches under comparison (mrcache and ucx)
// then see exactly the same invalidations, at the same points of the trace,
// whatever the allocator does internally. (With monitor=auto mrcache would
// also catch the allocator's own unmaps, but it would see a different event
// stream from UCX's, whose hooks are off in the peer.)
#ifndef BENCH_MRCACHE_DRIVER_H_
#define BENCH_MRCACHE_DRIVER_H_

#include <memory>

#include "bench/replay.h"
#include "mrcache/cache.h"

namespace mrbench {

class MrcacheDriver : public Driver {
 public:
  // `config` already carries the limits; its monitor is overridden to none.
  static absl::StatusOr<std::unique_ptr<MrcacheDriver>> Create(mrcache::Config config,
                                                               std::unique_ptr<mrcache::Registrar> registrar);
  absl::StatusOr<Lease> Get(void* addr, size_t length, int access) override;
  absl::Status Put(const Lease& lease) override;
  absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src, size_t length) override;
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
