#include "mrcache/registrars/custom_registrar.h"

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrcache {
namespace {

class CustomRegistrar : public Registrar {
 public:
  CustomRegistrar(const mrc_registrar_ops_t& ops, void* ctx, bool pins)
      : ops_(ops), ctx_(ctx), pins_(pins) {}

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
    int err = ops_.reg(ctx_, addr, length, access, &reg.handle, &reg.lkey, &reg.rkey);
    if (err != 0) {
      err = std::abs(err);
      return ErrnoStatus(err,
                         absl::StrCat("custom registrar: reg callback failed with errno ", err));
    }
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    int err = ops_.dereg(ctx_, reg.handle);
    if (err != 0) {
      err = std::abs(err);
      return ErrnoStatus(err,
                         absl::StrCat("custom registrar: dereg callback failed with errno ", err));
    }
    return absl::OkStatus();
  }

 private:
  const mrc_registrar_ops_t ops_;
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

}  // namespace mrcache
