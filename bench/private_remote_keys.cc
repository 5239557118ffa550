#include "bench/private_remote_keys.h"

#include "mrcache/registrar.h"

namespace mrbench {

bool RecordedWithPrivateRemoteKeys(const Trace& trace) {
  return trace.recorded() && trace.recorded_config.remote_keys == mrcache::RemoteKeys::kPrivate;
}

bool TakesPrivateRegistration(int access) { return (access & mrcache::kAccessRemoteBits) != 0; }

uint64_t RemoteRightAccesses(const Trace& trace) {
  uint64_t n = 0;
  for (const TraceOp& op : trace.ops) {
    if ((op.kind == TraceOp::kXfer || op.kind == TraceOp::kReg) &&
        TakesPrivateRegistration(op.access))
      ++n;
  }
  return n;
}

bool PrivateRemoteKeysDriver::IsPrivate(const Lease& lease) {
  return (reinterpret_cast<uintptr_t>(lease.handle) & 1) != 0;
}

Driver::Lease PrivateRemoteKeysDriver::Untagged(const Lease& lease) {
  Lease l = lease;
  l.handle = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(lease.handle) & ~uintptr_t{1});
  return l;
}

absl::StatusOr<Driver::Lease> PrivateRemoteKeysDriver::Get(void* addr, size_t length, int access) {
  if (!TakesPrivateRegistration(access)) return cached_.Get(addr, length, access);
  absl::StatusOr<Lease> lease = direct_.Get(addr, length, access);
  if (lease.ok()) {
    lease->handle = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(lease->handle) | 1);
  }
  return lease;
}

absl::Status PrivateRemoteKeysDriver::Put(const Lease& lease) {
  return IsPrivate(lease) ? direct_.Put(Untagged(lease)) : cached_.Put(lease);
}

absl::Status PrivateRemoteKeysDriver::DeviceWrite(const Lease& lease, size_t offset,
                                                  const void* src, size_t length) {
  return IsPrivate(lease) ? direct_.DeviceWrite(Untagged(lease), offset, src, length)
                          : cached_.DeviceWrite(lease, offset, src, length);
}

}  // namespace mrbench
