// region_limit.cc: the max_region_bytes decorator (region_limit.h).
#include "mrcache/registrars/region_limit.h"

#include <utility>

#include "mrcache/forwarding_registrar.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/registration_checks.h"

namespace mrcache {
namespace {

class RegionLimitRegistrar final : public ForwardingRegistrar {
 public:
  RegionLimitRegistrar(std::unique_ptr<Registrar> inner, size_t limit)
      : ForwardingRegistrar(std::move(inner)), limit_(limit) {}

  size_t max_region_bytes() const override {
    const size_t own = ForwardingRegistrar::max_region_bytes();
    return own != 0 && own < limit_ ? own : limit_;
  }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    const bool implicit =
        addr == nullptr && length == kImplicitOdpLength && (access & kAccessOnDemand);
    if (!implicit) {
      absl::Status fits = CheckRegionLimit(addr, length, limit_, "max_region_bytes");
      if (!fits.ok()) return fits;
    }
    return ForwardingRegistrar::Register(addr, length, access);
  }

 private:
  const size_t limit_;  // > 0
};

}  // namespace

std::unique_ptr<Registrar> WithRegionLimit(std::unique_ptr<Registrar> inner,
                                           size_t max_region_bytes) {
  if (max_region_bytes == 0 || inner == nullptr) return inner;
  return std::make_unique<RegionLimitRegistrar>(std::move(inner), max_region_bytes);
}

}  // namespace mrcache
