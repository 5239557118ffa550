#include "mrcache/registrars/custom_registrar.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrcache {
namespace {

// Calls either mrc_registrar_ops_t's callbacks or, with rail >= 0,
// mrc_rail_registrar_ops_t's with that rail.
class CustomRegistrar : public Registrar {
 public:
  CustomRegistrar(const mrc_registrar_ops_t& ops, void* ctx, bool pins)
      : ops_(ops), rail_ops_{}, rail_(-1), ctx_(ctx), pins_(pins) {}
  CustomRegistrar(const mrc_rail_registrar_ops_t& ops, int rail, void* ctx, bool pins)
      : ops_{}, rail_ops_(ops), rail_(rail), ctx_(ctx), pins_(pins) {}

  const char* name() const override { return "custom"; }
  bool pins_memory() const override { return pins_; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (length == 0) return ErrnoStatus(EINVAL, "custom registrar: length is 0");
    if (reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr)) {
      return ErrnoStatus(EINVAL, "custom registrar: addr + length overflows");
    }
    absl::Status ok = ValidateAccess(access);
    if (!ok.ok()) return ok;
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    int err = rail_ < 0 ? ops_.reg(ctx_, addr, length, access, &reg.handle, &reg.lkey, &reg.rkey)
                        : rail_ops_.reg(ctx_, rail_, addr, length, access, &reg.handle, &reg.lkey,
                                        &reg.rkey);
    if (err != 0) {
      err = std::abs(err);
      return ErrnoStatus(err,
                         absl::StrCat("custom registrar: reg callback failed with errno ", err));
    }
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    int err = rail_ < 0 ? ops_.dereg(ctx_, reg.handle) : rail_ops_.dereg(ctx_, rail_, reg.handle);
    if (err != 0) {
      err = std::abs(err);
      return ErrnoStatus(err,
                         absl::StrCat("custom registrar: dereg callback failed with errno ", err));
    }
    return absl::OkStatus();
  }

 private:
  const mrc_registrar_ops_t ops_;
  const mrc_rail_registrar_ops_t rail_ops_;
  const int rail_;
  void* const ctx_;
  const bool pins_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Registrar>> MakeCustomRegistrar(const mrc_registrar_ops_t* ops,
                                                               void* ctx, bool pins) {
  if (ops == nullptr || ops->reg == nullptr || ops->dereg == nullptr) {
    return ErrnoStatus(EINVAL, "custom registrar: ops and both callbacks are required");
  }
  return std::unique_ptr<Registrar>(new CustomRegistrar(*ops, ctx, pins));
}

absl::StatusOr<std::vector<std::unique_ptr<Registrar>>> MakeCustomRailRegistrars(
    const mrc_rail_registrar_ops_t* ops, void* ctx, int nrails, bool pins) {
  if (ops == nullptr || ops->reg == nullptr || ops->dereg == nullptr) {
    return ErrnoStatus(EINVAL, "custom registrar: ops and both callbacks are required");
  }
  if (nrails < 1 || nrails > 64) {
    return ErrnoStatus(EINVAL,
                       absl::StrCat("custom registrar: nrails ", nrails, " is not in 1..64"));
  }
  std::vector<std::unique_ptr<Registrar>> rails;
  for (int rail = 0; rail < nrails; ++rail) {
    rails.emplace_back(new CustomRegistrar(*ops, rail, ctx, pins));
  }
  return rails;
}

}  // namespace mrcache
