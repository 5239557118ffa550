// verbs_registrar.h: rdma-core registration on a caller's protection domain.
//
// Register -> ibv_reg_mr_iova2(pd, addr, len, iova = addr, access); the handle
// is the struct ibv_mr*; keys are the MR's. Deregister -> ibv_dereg_mr.
// Capabilities come from ibv_query_device_ex (odp_caps, and max_mr_size, which
// is max_region_bytes(): a longer registration is EINVAL naming it). Errors
// keep the errno libibverbs set, with a message naming the call.
#ifndef MRCACHE_VERBS_REGISTRAR_H_
#define MRCACHE_VERBS_REGISTRAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

struct ibv_pd;

namespace mrcache {

// EINVAL for a null pd.
absl::StatusOr<std::unique_ptr<Registrar>> MakeVerbsRegistrar(ibv_pd* pd, const Config& config);

}  // namespace mrcache

#endif  // MRCACHE_VERBS_REGISTRAR_H_
