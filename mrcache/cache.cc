// cache.cc: the public C++ Cache, a thin owner of CacheImpl.
#include "mrcache/cache.h"

#include <cerrno>

#include "mrcache/core/cache_impl.h"
#include "mrcache/core/region.h"
#include "mrcache/errno_status.h"
#include "mrcache/stats_publisher.h"

namespace mrcache {

RegionInfo GetRegionInfo(const Region* region) {
  RegionInfo info;
  if (region == nullptr) return info;
  info.addr = region->reg.addr;
  info.length = region->reg.length;
  info.lkey = region->reg.lkey;
  info.rkey = region->reg.rkey;
  info.access = region->reg.access;
  info.handle = region->reg.handle;
  info.mr = region->reg.mr;
  return info;
}

RegionRef& RegionRef::operator=(RegionRef&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = other.cache_;
    region_ = other.region_;
    other.cache_ = nullptr;
    other.region_ = nullptr;
  }
  return *this;
}

void RegionRef::reset() {
  if (region_ != nullptr) (void)cache_->Put(region_);
  region_ = nullptr;
  cache_ = nullptr;
}

Region* RegionRef::release() {
  Region* r = region_;
  region_ = nullptr;
  cache_ = nullptr;
  return r;
}

Cache::Cache(std::unique_ptr<CacheImpl> impl) : impl_(std::move(impl)) {}
Cache::~Cache() = default;

absl::StatusOr<std::unique_ptr<Cache>> Cache::Create(const Config& config,
                                                     std::unique_ptr<Registrar> registrar) {
  auto impl = CacheImpl::Create(config, std::move(registrar));
  if (!impl.ok()) return impl.status();
  std::unique_ptr<Cache> cache(new Cache(std::move(*impl)));
  if (config.stats_shm) {
    Registrar& r = cache->impl_->registrar();
    cache->published_ =
        StatsPublication::Publish(cache->impl_.get(), r.rail(), r.name(), config.max_bytes);
  }
  return cache;
}

absl::StatusOr<RegionRef> Cache::Get(void* addr, size_t length, int access) {
  auto r = Acquire(addr, length, access);
  if (!r.ok()) return r.status();
  return RegionRef(this, *r);
}

// Cache::Acquire and Cache::Put are defined in core/cache_impl.cc, where
// CacheImpl's hit path inlines into them: a get or put is one call.
absl::Status Cache::Invalidate(void* addr, size_t length) {
  return impl_->Invalidate(addr, length);
}
absl::Status Cache::Flush() { return impl_->Flush(); }
absl::Status Cache::DeviceWrite(Region* region, size_t offset, const void* src, size_t length) {
  return impl_->DeviceWrite(region, offset, src, length);
}
CacheStats Cache::stats() const { return impl_->stats(); }
void Cache::SetRetireCallback(RetireCallback callback) {
  impl_->SetRetireCallback(std::move(callback));
}
const Config& Cache::config() const { return impl_->config(); }
Registrar& Cache::registrar() { return impl_->registrar(); }
std::string Cache::monitor_name() const { return impl_->monitor_name(); }

}  // namespace mrcache
