// pool_c_api.cc: mrc_pool_* of mrcache.h over mrcache::Pool.
//
// A pool takes its registrar from the cache it is created on (Cache::registrar())
// and must be destroyed before that cache. Errors: functions that return int
// return the errno; mrc_pool_alloc sets errno; mrc_pool_free, which returns
// nothing, prints the reason on stderr (a foreign pointer is never freed).
#include <cerrno>
#include <cstdio>
#include <memory>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/pool.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/c_api_handles.h"
#include "mrcache/internal/log.h"
#include "mrcache/mrcache.h"

// mrc_config_t and mrc_cache_t come from mrcache/internal/c_api_handles.h.
struct mrc_pool {
  std::unique_ptr<mrcache::Pool> pool;
};

extern "C" {

int mrc_pool_create(mrc_cache_t* cache, const mrc_config_t* cfg, mrc_pool_t** pool) {
  if (cache == nullptr || cache->cache == nullptr || pool == nullptr) return EINVAL;
  mrcache::Config config;
  if (cfg != nullptr) {
    config = cfg->config;
  } else {
    absl::StatusOr<mrcache::Config> env = mrcache::Config::FromEnvironment();
    if (!env.ok()) {
      mrcache::Log(mrcache::LogLevel::kError,
                   absl::StrCat("mrc_pool_create: ", env.status().message()));
      return mrcache::StatusToErrno(env.status());
    }
    config = *env;
  }
  absl::StatusOr<std::unique_ptr<mrcache::Pool>> p =
      mrcache::Pool::Create(cache->cache->registrar(), config);
  if (!p.ok()) {
    mrcache::Log(mrcache::LogLevel::kError,
                 absl::StrCat("mrc_pool_create: ", p.status().message()));
    return mrcache::StatusToErrno(p.status());
  }
  *pool = new (std::nothrow) mrc_pool{std::move(*p)};
  return *pool == nullptr ? ENOMEM : 0;
}

void* mrc_pool_alloc(mrc_pool_t* pool, size_t size, mrc_region_info_t* keys) {
  if (pool == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  mrcache::RegionInfo info;
  absl::StatusOr<void*> p = pool->pool->Alloc(size, keys != nullptr ? &info : nullptr);
  if (!p.ok()) {
    errno = mrcache::StatusToErrno(p.status());
    return nullptr;
  }
  if (keys != nullptr) mrcache::CopyRegionInfo(info, keys);
  return *p;
}

int mrc_pool_keys(mrc_pool_t* pool, const void* ptr, mrc_region_info_t* keys) {
  if (pool == nullptr || keys == nullptr) return EINVAL;
  mrcache::RegionInfo info;
  absl::Status s = pool->pool->Keys(ptr, &info);
  if (!s.ok()) return mrcache::StatusToErrno(s);
  mrcache::CopyRegionInfo(info, keys);
  return 0;
}

void mrc_pool_free(mrc_pool_t* pool, void* ptr) {
  if (ptr == nullptr) return;
  if (pool == nullptr) {
    mrcache::Log(mrcache::LogLevel::kError,
                 absl::StrFormat("mrc_pool_free: pool is NULL; %p not freed", ptr));
    return;
  }
  absl::Status s = pool->pool->Free(ptr);
  if (!s.ok())
    mrcache::Log(mrcache::LogLevel::kError, absl::StrCat("mrc_pool_free: ", s.message()));
}

void mrc_pool_destroy(mrc_pool_t* pool) { delete pool; }

}  // extern "C"
