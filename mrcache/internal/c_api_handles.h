// c_api_handles.h: what the C API's opaque handles are (internal).
//
// mrc_config_t owns a mrcache::Config and mrc_cache_t owns a mrcache::Cache.
// Every translation unit that implements part of mrcache.h (c_api.cc, the
// pool's pool_c_api.cc) includes this one definition, so the types cannot
// drift apart.
#ifndef MRCACHE_C_API_HANDLES_H_
#define MRCACHE_C_API_HANDLES_H_

#include <memory>

#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/mrcache.h"

struct mrc_config {
  mrcache::Config config;
};

struct mrc_cache {
  std::unique_ptr<mrcache::Cache> cache;
};

namespace mrcache {

// A region's range and keys as the C API reports them.
inline void CopyRegionInfo(const RegionInfo& info, mrc_region_info_t* out) {
  out->addr = info.addr;
  out->length = info.length;
  out->lkey = info.lkey;
  out->rkey = info.rkey;
  out->access = info.access;
}

}  // namespace mrcache

#endif  // MRCACHE_C_API_HANDLES_H_
