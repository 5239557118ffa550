#include "mrcache/registrar.h"

#include <cerrno>
#include <cstdio>

#include "mrcache/errno_status.h"

namespace mrcache {

absl::Status ValidateAccess(int access) {
  if (access & ~kAccessKnownBits) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "unknown access bits 0x%x", access & ~kAccessKnownBits);
    return ErrnoStatus(EINVAL, msg);
  }
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) {
    return ErrnoStatus(EINVAL,
                       "IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC requires "
                       "IBV_ACCESS_LOCAL_WRITE");
  }
  return absl::OkStatus();
}

absl::Status Registrar::DeviceWrite(const Registration&, size_t, const void*, size_t) {
  return ErrnoStatus(ENOTSUP, std::string(name()) + " registrar cannot write as a device");
}

absl::Status Registrar::Prefetch(const Registration&, void*, size_t) {
  return ErrnoStatus(ENOTSUP, std::string(name()) + " registrar cannot prefetch");
}

}  // namespace mrcache
