// timed_registrar.cc: the registrar's calls, timed and counted
// (timed_registrar.h).
#include "mrcache/core/timed_registrar.h"

#include "absl/strings/str_cat.h"
#include "mrcache/internal/log.h"

namespace mrcache {
absl::StatusOr<Registration> TimedRegistrar::RegisterImplicit(int access) {
  const uint64_t t0 = NowTicks(setup_.tsc_ticks);
  auto reg = RegisterImplicitOdp(*setup_.registrar, access);
  AddTicksSince(registrar_ticks_, t0, setup_.tsc_ticks);
  if (reg.ok()) CountRegistration(0);  // pins nothing
  return reg;
}

void TimedRegistrar::CountRegionBytes(size_t bytes) { setup_.region_bytes->Add(bytes); }

void TimedRegistrar::CountDeregistrationNs(uint64_t ticks) {
  setup_.deregister_ns->Add(TicksToNsAt(ticks, setup_.ns_per_tick));
}

void TimedRegistrar::LogFailedDeregistration(const absl::Status& failure) const {
  Log(LogLevel::kError,
      absl::StrCat(setup_.registrar->name(), " deregistration failed: ", failure.message()));
}

}  // namespace mrcache
