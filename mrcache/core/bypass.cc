// bypass.cc: the dedicated and implicit registrations (bypass.h).
#include "mrcache/core/bypass.h"

#include <cerrno>

#include "mrcache/errno_status.h"

namespace mrcache {

absl::StatusOr<Region*> Bypass::Acquire(uintptr_t start, uintptr_t end, int access, Kind kind) {
  absl::StatusOr<Registration> reg = setup_.registrar->Register(start, end, access);
  if (!reg.ok()) {
    // Refusals the normal path then retries are not failures.
    const int err = StatusToErrno(reg.status());
    const bool retried = kind == Kind::kOversized ||
                         (kind == Kind::kNotAdmitted && (err == ENOMEM || err == EAGAIN));
    if (!retried) failures_.fetch_add(1, std::memory_order_relaxed);
    return reg.status();
  }
  return Adopt(start, end, *reg, kind);
}

Region* Bypass::Adopt(uintptr_t start, uintptr_t end, const Registration& reg, Kind kind) {
  auto* r = new Region;
  r->start = start;
  r->end = end;
  r->reg = reg;
  r->cache = setup_.cache;
  r->bypass = true;
  r->locked_refs = 1;
  (kind == Kind::kRemotePrivate ? remote_private_ : bypassed_)
      .fetch_add(1, std::memory_order_relaxed);
  setup_.registrar->CountRegistration(end - start);
  return r;
}

absl::StatusOr<Region*> Bypass::ImplicitRegion(int access) {
  // One implicit MR per set of remote rights, so that its rkey grants exactly
  // what was asked for; local write is always included.
  if (Region* r = implicit_.Find(access)) return r;
  auto reg = setup_.registrar->RegisterImplicit(kAccessLocalWrite | (access & kAccessRemoteBits));
  if (!reg.ok()) return reg.status();
  auto* r = new Region;
  r->start = 0;
  r->end = UINTPTR_MAX;
  r->reg = *reg;
  r->cache = setup_.cache;
  Region* published = implicit_.Publish(access, r);
  if (published != r) {
    setup_.registrar->Deregister(r->reg);  // another thread won the race
    delete r;
  }
  return published;
}

absl::Status Bypass::Put(Region* r) {
  const bool held = IsImplicitOdp(r->reg) ? implicit_.CountPut(r) : r->locked_refs == 1;
  if (!held) return ErrnoStatus(EINVAL, "mrc_put: region put more times than it was got");
  if (IsImplicitOdp(r->reg)) return absl::OkStatus();
  r->locked_refs = 0;
  setup_.registrar->Deregister(r->reg);
  delete r;
  return absl::OkStatus();
}

}  // namespace mrcache
