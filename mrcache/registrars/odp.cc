#include "mrcache/registrars/odp.h"

#include <cerrno>

#include "mrcache/errno_status.h"

namespace mrcache {

absl::StatusOr<OdpMode> ResolveOdpMode(OdpMode requested, const OdpCapabilities& caps) {
  switch (requested) {
    case OdpMode::kOff:
      return OdpMode::kOff;
    case OdpMode::kAuto:
      if (caps.implicit_odp) return OdpMode::kImplicit;
      if (caps.explicit_odp) return OdpMode::kExplicit;
      return OdpMode::kOff;
    case OdpMode::kExplicit:
      if (caps.explicit_odp) return OdpMode::kExplicit;
      return ErrnoStatus(ENOTSUP,
                         "odp=explicit: the device does not support on-demand paging "
                         "(odp_caps.general_caps lacks IBV_ODP_SUPPORT, or RC lacks "
                         "send/recv/write/read ODP)");
    case OdpMode::kImplicit:
      if (caps.implicit_odp) return OdpMode::kImplicit;
      return ErrnoStatus(ENOTSUP,
                         caps.explicit_odp
                             ? "odp=implicit: the device supports only explicit on-demand "
                               "paging (odp_caps.general_caps lacks IBV_ODP_SUPPORT_IMPLICIT); "
                               "use odp=explicit or odp=auto"
                             : "odp=implicit: the device does not support on-demand paging "
                               "(odp_caps.general_caps lacks IBV_ODP_SUPPORT and "
                               "IBV_ODP_SUPPORT_IMPLICIT); use odp=off or odp=auto");
  }
  return ErrnoStatus(EINVAL, "unknown odp mode");
}

absl::StatusOr<Registration> RegisterImplicitOdp(Registrar& registrar, int access) {
  absl::StatusOr<OdpMode> mode = ResolveOdpMode(OdpMode::kImplicit, registrar.odp_capabilities());
  if (!mode.ok()) return mode.status();
  return registrar.Register(nullptr, kImplicitOdpLength, access | kAccessOnDemand);
}

}  // namespace mrcache
