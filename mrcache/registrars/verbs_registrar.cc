// verbs_registrar.cc: the `verbs` registrar (see verbs_registrar.h).
//
// Capabilities: explicit ODP needs IBV_ODP_SUPPORT plus RC send, recv, write
// and read ODP (what a cached region is used for); implicit ODP additionally
// needs IBV_ODP_SUPPORT_IMPLICIT; prefetch needs explicit ODP and an
// advise_mr op in the context. MakeVerbsRegistrar fails (ENOTSUP) when
// config.odp asks for a mode the device lacks (ResolveOdpMode).
//
// Register(nullptr, SIZE_MAX, access | kAccessOnDemand) registers the implicit
// ODP MR (iova 0); every other registration uses iova == addr.
//
// DeviceWrite: real hardware cannot be asked to DMA, so this resolves
// softverbs_device_write (tests/softverbs) with dlsym at run time and is
// ENOTSUP without it. Prefetch: ibv_advise_mr with PREFETCH_WRITE (PREFETCH
// for regions without LOCAL_WRITE) and IBV_ADVISE_MR_FLAG_FLUSH.
#include "mrcache/registrars/verbs_registrar.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/registration_checks.h"

namespace mrcache {
namespace {

using DeviceWriteFn = int (*)(uint32_t lkey, uint64_t addr, const void* src, size_t len);

// A Status for a failed libibverbs call: its errno and a message naming it.
absl::Status VerbsError(int err, absl::string_view call) {
  if (err <= 0) err = EIO;  // a provider that forgot errno
  return ErrnoStatus(err, absl::StrCat(call, " failed: ", strerror(err)));
}

// What the registrar needs to know of the device.
struct DeviceCapabilities {
  OdpCapabilities odp;
  // The device's max_mr_size; 0 when it states none (0 or all ones).
  size_t max_mr_size = 0;
};

absl::StatusOr<DeviceCapabilities> QueryDeviceCapabilities(ibv_context* context) {
  ibv_device_attr_ex attr;
  memset(&attr, 0, sizeof attr);
  int ret = ibv_query_device_ex(context, nullptr, &attr);
  if (ret != 0) return VerbsError(ret, "ibv_query_device_ex");
  DeviceCapabilities device;
  const uint64_t max_mr_size = attr.orig_attr.max_mr_size;
  if (max_mr_size != UINT64_MAX && max_mr_size < SIZE_MAX) {
    device.max_mr_size = static_cast<size_t>(max_mr_size);
  }
  constexpr uint32_t kRcNeeds =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ;
  const ibv_odp_caps& odp = attr.odp_caps;
  OdpCapabilities& caps = device.odp;
  caps.explicit_odp = (odp.general_caps & IBV_ODP_SUPPORT) &&
                      (odp.per_transport_caps.rc_odp_caps & kRcNeeds) == kRcNeeds;
  caps.implicit_odp = caps.explicit_odp && (odp.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  caps.prefetch = caps.explicit_odp && verbs_get_ctx_op(context, advise_mr) != nullptr;
  return device;
}

class VerbsRegistrar : public Registrar {
 public:
  VerbsRegistrar(ibv_pd* pd, const DeviceCapabilities& device)
      : pd_(pd),
        caps_(device.odp),
        max_mr_size_(device.max_mr_size),
        device_write_(
            reinterpret_cast<DeviceWriteFn>(dlsym(RTLD_DEFAULT, "softverbs_device_write"))) {}

  const char* name() const override { return "verbs"; }
  std::string rail() const override {
    const char* device = pd_->context != nullptr && pd_->context->device != nullptr
                             ? ibv_get_device_name(pd_->context->device)
                             : nullptr;
    return device != nullptr ? device : "verbs";
  }
  // ibv_reg_mr pins and charges the process's RLIMIT_MEMLOCK; ODP
  // registrations pin nothing, which the cache knows from their access bits.
  bool pins_memory() const override { return true; }
  size_t max_region_bytes() const override { return max_mr_size_; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    absl::Status valid = ValidateAccess(access);
    if (!valid.ok()) return valid;
    const bool implicit =
        addr == nullptr && length == kImplicitOdpLength && (access & kAccessOnDemand);
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
    if (!implicit && (length == 0 || start + length < start)) {
      return ErrnoStatus(EINVAL,
                         absl::StrFormat("verbs registrar: bad range %p + %u", addr, length));
    }
    // Refused here rather than by the device, so that the error names the
    // limit (a device may also register less than asked: never let it).
    if (!implicit) {
      absl::Status fits = CheckRegionLimit(addr, length, max_mr_size_,
                                           absl::StrCat("the device's max_mr_size (", rail(), ")"));
      if (!fits.ok()) return fits;
    }
    const uint64_t iova = implicit ? 0 : start;
    errno = 0;
    ibv_mr* mr = ibv_reg_mr_iova2(pd_, addr, length, iova, static_cast<unsigned>(access));
    if (mr == nullptr) {
      return VerbsError(errno, absl::StrFormat("ibv_reg_mr_iova2(addr=%p, length=%u, access=0x%x)",
                                               addr, length, access));
    }
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = reinterpret_cast<uintptr_t>(mr);
    reg.mr = mr;
    reg.lkey = mr->lkey;
    reg.rkey = mr->rkey;
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    ibv_mr* mr = reg.mr;
    if (mr == nullptr) return ErrnoStatus(EINVAL, "verbs registrar: registration without an MR");
    int ret = ibv_dereg_mr(mr);
    if (ret != 0) {
      return VerbsError(ret, absl::StrFormat("ibv_dereg_mr(lkey=0x%x)", reg.lkey));
    }
    return absl::OkStatus();
  }

  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    if (device_write_ == nullptr) {
      return ErrnoStatus(ENOTSUP,
                         "verbs registrar: device-side writes need softverbs "
                         "(softverbs_device_write is not loaded)");
    }
    if (offset > reg.length || length > reg.length - offset) {
      return ErrnoStatus(EINVAL, absl::StrFormat("verbs registrar: write of %u bytes at offset %u "
                                                 "outside a %u-byte registration",
                                                 length, offset, reg.length));
    }
    const uint64_t at = reinterpret_cast<uintptr_t>(reg.addr) + offset;
    int ret = device_write_(reg.lkey, at, src, length);
    if (ret != 0) {
      return VerbsError(ret, absl::StrFormat("softverbs_device_write(lkey=0x%x, addr=0x%x, len=%u)",
                                             reg.lkey, at, length));
    }
    return absl::OkStatus();
  }

  OdpCapabilities odp_capabilities() const override { return caps_; }

  absl::Status Prefetch(const Registration& reg, void* addr, size_t length) override {
    if (!caps_.prefetch) {
      return ErrnoStatus(ENOTSUP, "verbs registrar: the device cannot prefetch (no ODP)");
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
    if (length == 0 || start + length < start) {
      return ErrnoStatus(EINVAL, "verbs registrar: empty or wrapping prefetch range");
    }
    // An SGE carries at most 2^31 bytes here (its length is 32-bit).
    constexpr size_t kMaxSge = size_t{1} << 31;
    std::vector<ibv_sge> sges;
    for (size_t done = 0; done < length; done += kMaxSge) {
      const size_t part = length - done < kMaxSge ? length - done : kMaxSge;
      sges.push_back(ibv_sge{start + done, static_cast<uint32_t>(part), reg.lkey});
    }
    const ibv_advise_mr_advice advice = (reg.access & kAccessLocalWrite)
                                            ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
                                            : IBV_ADVISE_MR_ADVICE_PREFETCH;
    int ret = ibv_advise_mr(pd_, advice, IBV_ADVISE_MR_FLAG_FLUSH, sges.data(),
                            static_cast<uint32_t>(sges.size()));
    if (ret != 0) {
      return VerbsError(ret, absl::StrFormat("ibv_advise_mr(lkey=0x%x, addr=%p, length=%u)",
                                             reg.lkey, addr, length));
    }
    return absl::OkStatus();
  }

 private:
  ibv_pd* const pd_;
  const OdpCapabilities caps_;
  const size_t max_mr_size_;  // 0 = the device states no limit
  const DeviceWriteFn device_write_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Registrar>> MakeVerbsRegistrar(ibv_pd* pd, const Config& config) {
  if (pd == nullptr || pd->context == nullptr) {
    return ErrnoStatus(EINVAL, "verbs registrar: needs a protection domain (pd is null)");
  }
  absl::StatusOr<DeviceCapabilities> device = QueryDeviceCapabilities(pd->context);
  if (!device.ok()) return device.status();
  absl::StatusOr<OdpMode> mode = ResolveOdpMode(config.odp, device->odp);
  if (!mode.ok()) return mode.status();
  return std::unique_ptr<Registrar>(new VerbsRegistrar(pd, *device));
}

}  // namespace mrcache
