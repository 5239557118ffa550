// timed_registrar.cc: the registrar's calls, timed and counted
// (timed_registrar.h).
#include "mrcache/core/timed_registrar.h"

#include "absl/strings/str_cat.h"
#include "mrcache/internal/log.h"

namespace mrcache {
namespace {

void AtomicMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

absl::StatusOr<Registration> TimedRegistrar::RegisterImplicit(int access) {
  const uint64_t t0 = NowTicks(setup_.tsc_ticks);
  auto reg = RegisterImplicitOdp(*setup_.registrar, access);
  AddTicksSince(registrar_ticks_, t0, setup_.tsc_ticks);
  if (reg.ok()) CountRegistration(0);  // pins nothing
  return reg;
}

void TimedRegistrar::CountRegistration(size_t pinned) {
  registrations_.fetch_add(1, std::memory_order_relaxed);
  AtomicMax(peak_pinned_bytes_,
            pinned_bytes_.fetch_add(pinned, std::memory_order_relaxed) + pinned);
}

void TimedRegistrar::LogFailedDeregistration(const absl::Status& failure) const {
  Log(LogLevel::kError,
      absl::StrCat(setup_.registrar->name(), " deregistration failed: ", failure.message()));
}

}  // namespace mrcache
