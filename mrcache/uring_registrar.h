// uring_registrar.h: io_uring fixed buffers as a registrar (real kernel pinning).
//
// IORING_REGISTER_BUFFERS2 with a sparse table of `slots` entries, then
// IORING_REGISTER_BUFFERS_UPDATE per registration: the kernel pins the pages
// with the same long-term GUP that ibv_reg_mr uses. The handle is the slot
// index; lkey = rkey = slot index + 1 (so 0 is never a valid key).
// DeviceWrite is an IORING_OP_READ_FIXED from a memfd into the slot's pinned
// pages: a stale registration writes where the application cannot see.
#ifndef MRCACHE_URING_REGISTRAR_H_
#define MRCACHE_URING_REGISTRAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

// True if io_uring with sparse fixed-buffer tables works in this process.
bool UringAvailable();

// ENOTSUP (with the reason) where io_uring is unavailable.
absl::StatusOr<std::unique_ptr<Registrar>> MakeUringRegistrar(const Config& config);

}  // namespace mrcache

#endif  // MRCACHE_URING_REGISTRAR_H_
