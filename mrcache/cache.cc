// cache.cc: the public C++ Cache, a thin owner of CacheImpl.
#include "mrcache/cache.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "mrcache/core/cache_impl.h"
#include "mrcache/core/region.h"
#include "mrcache/errno_status.h"
#include "mrcache/rails_stats.h"
#include "mrcache/stats_publisher.h"

namespace mrcache {

namespace {

RegionInfo InfoOf(const Registration& reg) {
  RegionInfo info;
  info.addr = reg.addr;
  info.length = reg.length;
  info.lkey = reg.lkey;
  info.rkey = reg.rkey;
  info.access = reg.access;
  info.handle = reg.handle;
  info.mr = reg.mr;
  return info;
}

}  // namespace

RegionInfo GetRegionInfo(const Region* region) {
  if (region == nullptr) return RegionInfo{};
  RegionInfo info = InfoOf(region->reg);
  if (__builtin_expect(region->reg.rails, 0)) {
    absl::StatusOr<Registration> rail0 = RailsRegistrar::RailRegistration(region->reg, 0);
    if (rail0.ok()) {
      info.lkey = rail0->lkey;
      info.rkey = rail0->rkey;
      info.mr = rail0->mr;
    }
  }
  return info;
}

absl::StatusOr<RegionInfo> GetRegionRailInfo(const Region* region, int rail) {
  if (region == nullptr) return ErrnoStatus(EINVAL, "no region");
  if (rail < 0 || rail >= kMaxRails) {
    return ErrnoStatus(EINVAL,
                       absl::StrCat("rail ", rail, " is not between 0 and ", kMaxRails - 1));
  }
  if (!region->reg.rails) {
    if (rail != 0) {
      return ErrnoStatus(ENOENT, absl::StrCat("the region's cache has one rail, not ", rail));
    }
    return InfoOf(region->reg);
  }
  absl::StatusOr<Registration> reg = RailsRegistrar::RailRegistration(region->reg, rail);
  if (!reg.ok()) return reg.status();
  RegionInfo info = InfoOf(*reg);
  info.addr = region->reg.addr;
  info.length = region->reg.length;
  info.access = region->reg.access;
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
  return CreateOver(config, std::move(registrar), nullptr);
}

absl::StatusOr<std::unique_ptr<Cache>> Cache::CreateOver(const Config& config,
                                                         std::unique_ptr<Registrar> registrar,
                                                         RailsRegistrar* rails) {
  auto impl = CacheImpl::Create(config, std::move(registrar));
  if (!impl.ok()) return impl.status();
  std::unique_ptr<Cache> cache(new Cache(std::move(*impl)));
  cache->rails_ = rails;
  if (config.stats_shm) {
    Registrar& r = cache->impl_->registrar();
    cache->published_ =
        StatsPublication::Publish(cache->impl_.get(), rails, r.rail(), r.name(), config.max_bytes);
  }
  return cache;
}

absl::StatusOr<std::unique_ptr<Cache>> Cache::CreateRails(
    const Config& config, std::vector<std::unique_ptr<Registrar>> rails) {
  if (config.odp != OdpMode::kOff) {
    return ErrnoStatus(EOPNOTSUPP, "rails: on-demand paging (odp) is not available with rails");
  }
  auto registrar = RailsRegistrar::Create(std::move(rails));
  if (!registrar.ok()) return registrar.status();
  RailsRegistrar* raw = registrar->get();
  auto cache = CreateOver(config, std::unique_ptr<Registrar>(std::move(*registrar)), raw);
  if (cache.ok()) (*cache)->rails_max_bytes_ = config.max_bytes;
  return cache;
}

absl::StatusOr<RegionRef> Cache::Get(void* addr, size_t length, int access) {
  auto r = Acquire(addr, length, access);
  if (!r.ok()) return r.status();
  return RegionRef(this, *r);
}

absl::StatusOr<RegionRef> Cache::GetRails(void* addr, size_t length, int access, uint64_t rails) {
  auto r = AcquireRails(addr, length, access, rails);
  if (!r.ok()) return r.status();
  return RegionRef(this, *r);
}

int Cache::rail_count() const { return rails_ != nullptr ? rails_->rail_count() : 1; }

absl::StatusOr<RailStats> Cache::rail_stats(int rail) const {
  if (rail < 0 || rail >= rail_count()) {
    return ErrnoStatus(ENOENT,
                       absl::StrCat("rail ", rail, " is not one of the cache's ", rail_count()));
  }
  if (rails_ != nullptr) return rails_->stats(rail);
  const CacheStats s = impl_->stats();
  RailStats r;
  r.registrations = s.registrations;
  r.deregistrations = s.deregistrations;
  r.regions = s.registrations - s.deregistrations;
  r.registered_bytes = s.pinned_bytes;
  r.registrar_ns = s.registrar_ns;
  return r;
}

// Cache::Acquire and Cache::Put are defined in core/cache_impl.cc, where
// CacheImpl's hit path inlines into them: a get or put is one call; the
// rails get (AcquireRails), which Acquire calls, in core/rails_get.cc.
absl::Status Cache::Invalidate(void* addr, size_t length) {
  return impl_->Invalidate(addr, length);
}
absl::Status Cache::Flush() { return impl_->Flush(); }
absl::Status Cache::DeviceWrite(Region* region, size_t offset, const void* src, size_t length) {
  return impl_->DeviceWrite(region, offset, src, length);
}
CacheStats Cache::stats() const {
  CacheStats s = impl_->stats();
  return rails_ == nullptr ? s : CountedOnEachRail(s, *rails_);
}
void Cache::SetRetireCallback(RetireCallback callback) {
  impl_->SetRetireCallback(std::move(callback));
}
const Config& Cache::config() const { return impl_->config(); }
Registrar& Cache::registrar() { return impl_->registrar(); }
std::string Cache::monitor_name() const { return impl_->monitor_name(); }

}  // namespace mrcache
