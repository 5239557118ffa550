// c_api.cc: the C API of mrcache.h over the C++ Cache.
//
// mrc_region_t is the empty base of mrcache::Region (core/region.h), so a
// handle converts to its Region and back with static_cast; mrc_cache_t owns
// a mrcache::Cache; mrc_config_t owns a mrcache::Config (c_api_handles.h).
// Every entry point turns a Status into its errno (StatusToErrno) and never
// throws.
#include "mrcache/mrcache.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/core/region.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/c_api_handles.h"
#include "mrcache/internal/log.h"
#include "mrcache/registrars/custom_registrar.h"

namespace {

// A handle mrc_get returned is a Region (region.h): the downcast is exact.
mrcache::Region* AsRegion(mrc_region_t* r) { return static_cast<mrcache::Region*>(r); }
const mrcache::Region* AsRegion(const mrc_region_t* r) {
  return static_cast<const mrcache::Region*>(r);
}

int ConfigFor(const mrc_config_t* cfg, mrcache::Config* out) {
  if (cfg != nullptr) {
    *out = cfg->config;
    return 0;
  }
  auto env = mrcache::Config::FromEnvironment();
  if (!env.ok()) {
    mrcache::Log(mrcache::LogLevel::kError, env.status().message());
    return mrcache::StatusToErrno(env.status());
  }
  *out = *env;
  return 0;
}

int Report(const absl::Status& s) { return mrcache::StatusToErrno(s); }

// Hands a created cache to the C caller, or reports why creation failed.
int Adopt(absl::StatusOr<std::unique_ptr<mrcache::Cache>> c, mrc_cache_t** cache) {
  if (!c.ok()) {
    mrcache::Log(mrcache::LogLevel::kError, c.status().message());
    return Report(c.status());
  }
  *cache = new mrc_cache{std::move(*c)};
  return 0;
}

}  // namespace

extern "C" {

int mrc_config_create(mrc_config_t** cfg) {
  if (cfg == nullptr) return EINVAL;
  auto env = mrcache::Config::FromEnvironment();
  if (!env.ok()) {
    mrcache::Log(mrcache::LogLevel::kError, env.status().message());
    return Report(env.status());
  }
  auto* c = new (std::nothrow) mrc_config;
  if (c == nullptr) return ENOMEM;
  c->config = *env;
  *cfg = c;
  return 0;
}

int mrc_config_set(mrc_config_t* cfg, const char* key, const char* value) {
  if (cfg == nullptr || key == nullptr || value == nullptr) return EINVAL;
  return Report(cfg->config.Set(key, value));
}

int mrc_config_get(const mrc_config_t* cfg, const char* key, char* buf, size_t buflen) {
  if (cfg == nullptr || key == nullptr || buf == nullptr) return EINVAL;
  auto v = cfg->config.Get(key);
  if (!v.ok()) return ENOENT;
  if (v->size() + 1 > buflen) return ERANGE;
  std::memcpy(buf, v->c_str(), v->size() + 1);
  return 0;
}

void mrc_config_destroy(mrc_config_t* cfg) { delete cfg; }

int mrc_cache_create(const mrc_config_t* cfg, struct ibv_pd* pd, mrc_cache_t** cache) {
  if (cache == nullptr) return EINVAL;
  mrcache::Config config;
  if (int err = ConfigFor(cfg, &config)) return err;
  return Adopt(mrcache::Cache::Create(config, pd), cache);
}

int mrc_cache_create_custom(const mrc_config_t* cfg, const mrc_registrar_ops_t* ops, void* ctx,
                            mrc_cache_t** cache) {
  if (cache == nullptr) return EINVAL;
  mrcache::Config config;
  if (int err = ConfigFor(cfg, &config)) return err;
  auto reg = mrcache::MakeCustomRegistrar(ops, ctx, config.custom_pins);
  if (!reg.ok()) return Report(reg.status());
  return Adopt(mrcache::Cache::Create(config, std::move(*reg)), cache);
}

int mrc_cache_create_rails(const mrc_config_t* cfg, struct ibv_pd* const* pds, int npds,
                           mrc_cache_t** cache) {
  if (cache == nullptr) return EINVAL;
  mrcache::Config config;
  if (int err = ConfigFor(cfg, &config)) return err;
  return Adopt(mrcache::Cache::CreateRails(config, pds, npds), cache);
}

int mrc_cache_create_custom_rails(const mrc_config_t* cfg, const mrc_rail_registrar_ops_t* ops,
                                  void* ctx, int nrails, mrc_cache_t** cache) {
  if (cache == nullptr) return EINVAL;
  mrcache::Config config;
  if (int err = ConfigFor(cfg, &config)) return err;
  auto rails = mrcache::MakeCustomRailRegistrars(ops, ctx, nrails, config.custom_pins);
  if (!rails.ok()) return Report(rails.status());
  return Adopt(mrcache::Cache::CreateRails(config, std::move(*rails)), cache);
}

int mrc_cache_rails(const mrc_cache_t* cache) {
  return cache == nullptr ? 0 : cache->cache->rail_count();
}

void mrc_cache_destroy(mrc_cache_t* cache) { delete cache; }

int mrc_get(mrc_cache_t* cache, void* addr, size_t length, int access, mrc_region_t** region) {
  if (cache == nullptr || region == nullptr) return EINVAL;
  auto r = cache->cache->Acquire(addr, length, access);
  if (!r.ok()) return Report(r.status());
  *region = *r;  // Region -> its mrc_region base
  return 0;
}

int mrc_get_rails(mrc_cache_t* cache, void* addr, size_t length, int access, uint64_t rails,
                  mrc_region_t** region) {
  if (cache == nullptr || region == nullptr) return EINVAL;
  auto r = cache->cache->AcquireRails(addr, length, access, rails);
  if (!r.ok()) return Report(r.status());
  *region = *r;
  return 0;
}

int mrc_put(mrc_cache_t* cache, mrc_region_t* region) {
  if (cache == nullptr || region == nullptr) return EINVAL;
  return Report(cache->cache->Put(AsRegion(region)));
}

void mrc_region_info(const mrc_region_t* region, mrc_region_info_t* info) {
  if (info == nullptr) return;
  mrcache::CopyRegionInfo(mrcache::GetRegionInfo(AsRegion(region)), info);
}

int mrc_region_rail_info(const mrc_region_t* region, int rail, mrc_region_info_t* info) {
  if (region == nullptr || info == nullptr) return EINVAL;
  auto i = mrcache::GetRegionRailInfo(AsRegion(region), rail);
  if (!i.ok()) return Report(i.status());
  mrcache::CopyRegionInfo(*i, info);
  return 0;
}

int mrc_rail_stats(const mrc_cache_t* cache, int rail, mrc_rail_stats_t* stats) {
  if (cache == nullptr || stats == nullptr) return EINVAL;
  auto s = cache->cache->rail_stats(rail);
  if (!s.ok()) return Report(s.status());
  stats->registrations = s->registrations;
  stats->deregistrations = s->deregistrations;
  stats->regions = s->regions;
  stats->registered_bytes = s->registered_bytes;
  stats->registrar_ns = s->registrar_ns;
  return 0;
}

uint64_t mrc_region_handle(const mrc_region_t* region) {
  return region == nullptr ? 0 : AsRegion(region)->reg.handle;
}

int mrc_invalidate(mrc_cache_t* cache, void* addr, size_t length) {
  if (cache == nullptr) return EINVAL;
  return Report(cache->cache->Invalidate(addr, length));
}

int mrc_flush(mrc_cache_t* cache) {
  if (cache == nullptr) return EINVAL;
  return Report(cache->cache->Flush());
}

int mrc_region_device_write(mrc_cache_t* cache, mrc_region_t* region, size_t offset,
                            const void* src, size_t length) {
  if (cache == nullptr || region == nullptr || src == nullptr) return EINVAL;
  return Report(cache->cache->DeviceWrite(AsRegion(region), offset, src, length));
}

int mrc_stats_sized(const mrc_cache_t* cache, mrc_stats_t* stats, size_t size) {
  if (cache == nullptr || stats == nullptr || size == 0) return EINVAL;
  mrcache::CacheStats s = cache->cache->stats();
  mrc_stats_t all{};
  all.hits = s.hits;
  all.misses = s.misses;
  all.registrations = s.registrations;
  all.deregistrations = s.deregistrations;
  all.evictions = s.evictions;
  all.invalidations = s.invalidations;
  all.merges = s.merges;
  all.regions = s.regions;
  all.pinned_bytes = s.pinned_bytes;
  all.registrar_ns = s.registrar_ns;
  all.peak_pinned_bytes = s.peak_pinned_bytes;
  all.registrar_failures = s.registrar_failures;
  all.bypassed = s.bypassed;
  all.remote_private = s.remote_private;
  all.monitor_incomplete = s.monitor_incomplete;
  all.pin_budget_bytes = s.pin_budget_bytes;
  all.watch_failures = s.watch_failures;
  all.watch_enomem = s.watch_enomem;
  all.watch_ebusy = s.watch_ebusy;
  all.watch_eperm = s.watch_eperm;
  all.watch_einval = s.watch_einval;
  all.watch_map_limit = s.watch_map_limit;
  all.watch_other = s.watch_other;
  all.dereg_queue_depth = s.dereg_queue_depth;
  all.dereg_wait_ns = s.dereg_wait_ns;
  all.background_dereg_ns = s.background_dereg_ns;
  // Whole fields only: a size that ends inside a field leaves that field alone.
  const size_t known = std::min(size, sizeof all) / sizeof(uint64_t) * sizeof(uint64_t);
  std::memcpy(stats, &all, known);
  if (size > sizeof all)
    std::memset(reinterpret_cast<char*>(stats) + sizeof all, 0, size - sizeof all);
  return 0;
}

// The mrc_stats_t of the header that had no sized call ended at remote_private.
constexpr size_t kUnsizedStatsBytes = offsetof(mrc_stats_t, remote_private) + sizeof(uint64_t);

void(mrc_stats)(const mrc_cache_t* cache, mrc_stats_t* stats) {
  mrc_stats_sized(cache, stats, kUnsizedStatsBytes);
}

void mrc_set_log_callback(mrc_log_cb_t fn, void* arg) { mrcache::SetLogCallback(fn, arg); }

const char* mrc_strerror(int err) {
  switch (err) {
    case 0:
      return "success";
    case EINVAL:
      return "invalid argument (bad address range, access flags, key or value)";
    case ENOMEM:
      return "out of memory or registration resources (RLIMIT_MEMLOCK, device limits)";
    case EAGAIN:
      return "resource temporarily unavailable; the memory kept changing or the device is busy";
    case EFAULT:
      return "the range is not mapped memory that can be registered";
    case ENOTSUP:
      return "operation not supported by this registrar or device";
    case ECHILD:
      return "the cache belongs to the parent process (after fork)";
    case EBUSY:
      return "resource busy (regions still in use)";
    case ENOENT:
      return "no such entry";
    case ERANGE:
      return "buffer too small";
    case EPERM:
      return "operation not permitted";
    default:
      return std::strerror(err);
  }
}

int mrc_set_retire_callback(mrc_cache_t* cache, mrc_retire_cb_t fn, void* arg) {
  if (cache == nullptr) return EINVAL;
  if (fn == nullptr) {
    cache->cache->SetRetireCallback(nullptr);
  } else {
    cache->cache->SetRetireCallback(
        [fn, arg](void* addr, size_t length, uint64_t handle) { fn(arg, addr, length, handle); });
  }
  return 0;
}

}  // extern "C"
