#include "bench/mrcache_driver.h"

namespace mrbench {

absl::StatusOr<std::unique_ptr<MrcacheDriver>> MrcacheDriver::Create(
    mrcache::Config config, std::unique_ptr<mrcache::Registrar> registrar) {
  absl::StatusOr<std::unique_ptr<mrcache::Cache>> cache =
      mrcache::Cache::Create(config, std::move(registrar));
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<MrcacheDriver>(new MrcacheDriver(std::move(*cache)));
}

absl::StatusOr<Driver::Lease> MrcacheDriver::Get(void* addr, size_t length, int access) {
  absl::StatusOr<mrcache::Region*> region = cache_->Acquire(addr, length, access);
  if (!region.ok()) return region.status();
  const mrcache::RegionInfo info = mrcache::GetRegionInfo(*region);
  Lease lease;
  lease.handle = *region;
  lease.region_addr = reinterpret_cast<uintptr_t>(info.addr);
  lease.region_length = info.length;
  return lease;
}

absl::Status MrcacheDriver::Put(const Lease& lease) {
  return cache_->Put(static_cast<mrcache::Region*>(lease.handle));
}

absl::Status MrcacheDriver::DeviceWrite(const Lease& lease, size_t offset, const void* src,
                                        size_t length) {
  return cache_->DeviceWrite(static_cast<mrcache::Region*>(lease.handle), offset, src, length);
}

absl::Status MrcacheDriver::Release(void* addr, size_t length) {
  return cache_->Invalidate(addr, length);
}

absl::Status MrcacheDriver::Finish() {
  cache_.reset();
  return absl::OkStatus();
}

}  // namespace mrbench
