// shim_defaults.h: where the shim's configuration starts before MRCACHE_*.
//
// The shim stands in for ibv_reg_mr/ibv_dereg_mr, whose rkey covers exactly
// the registered bytes and dies at ibv_dereg_mr. So, unlike the library, it
// defaults to remote_keys=private: a request with a remote right gets its own
// registration of exactly its bytes, deregistered when the application
// deregisters it. MRCACHE_REMOTE_KEYS (mrcache-run --remote-keys) overrides.
#ifndef INTERPOSE_SHIM_DEFAULTS_H_
#define INTERPOSE_SHIM_DEFAULTS_H_

#include "mrcache/config.h"

namespace mrcache_preload {

// The library's defaults, with remote_keys=private.
inline mrcache::Config ShimDefaults() {
  mrcache::Config config;
  config.remote_keys = mrcache::RemoteKeys::kPrivate;
  return config;
}

}  // namespace mrcache_preload

#endif  // INTERPOSE_SHIM_DEFAULTS_H_
