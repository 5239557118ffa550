#include "bench/ucx_rcache.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

ucs_status_t MemReg(void* context, ucs_rcache_t*, void*, ucs_rcache_region_t* region, uint16_t) {
  auto* cache = static_cast<UcxRcache*>(context);
  auto* r = reinterpret_cast<UcxRegion*>(region);
  const uintptr_t start = region->super.start;
  absl::StatusOr<mrcache::Registration> reg = cache->registrar().Register(
      reinterpret_cast<void*>(start), region->super.end - start, cache->access());
  if (!reg.ok()) {
    const int err = mrcache::StatusToErrno(reg.status());
    return err == ENOMEM || err == EAGAIN ? UCS_ERR_NO_MEMORY : UCS_ERR_IO_ERROR;
  }
  r->reg = *reg;
  return UCS_OK;
}

void MemDereg(void* context, ucs_rcache_t*, ucs_rcache_region_t* region) {
  auto* cache = static_cast<UcxRcache*>(context);
  absl::Status status = cache->registrar().Deregister(reinterpret_cast<UcxRegion*>(region)->reg);
  if (!status.ok())
    std::fprintf(stderr, "mrbench: ucx peer: deregister: %s\n", status.ToString().c_str());
}

void DumpRegion(void*, ucs_rcache_t*, ucs_rcache_region_t* region, char* buf, size_t max) {
  std::snprintf(buf, max, "handle %llu",
                static_cast<unsigned long long>(reinterpret_cast<UcxRegion*>(region)->reg.handle));
}

const ucs_rcache_ops_t kOps = {MemReg, MemDereg, DumpRegion};

// What UCX's InfiniBand memory domain uses by default (UCX_IB_RCACHE_ADDR_ALIGN,
// one cache line): regions are not page-aligned.
constexpr size_t kUcxIbAlignment = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<UcxRcache>> UcxRcache::Create(const UcsApi& api,
                                                             mrcache::Registrar& registrar,
                                                             size_t max_regions, size_t max_bytes,
                                                             int access) {
  std::unique_ptr<UcxRcache> cache(new UcxRcache(api, registrar, access));
  ucs_rcache_params_t params = {};
  params.region_struct_size = sizeof(UcxRegion);
  params.alignment = kUcxIbAlignment;
  params.max_alignment = static_cast<size_t>(getpagesize());
  params.ucm_events = UCM_EVENT_VM_UNMAPPED;
  params.ucm_event_priority = 1000;
  params.ops = &kOps;
  params.context = cache.get();
  params.flags = 0;
  params.max_regions = max_regions == 0 ? ULONG_MAX : max_regions;
  params.max_size = max_bytes == 0 ? SIZE_MAX : max_bytes;
  params.max_unreleased = SIZE_MAX;
  ucs_status_t status = api.rcache_create(&params, "mrbench", nullptr, &cache->rcache_);
  if (status != UCS_OK)
    return ErrnoStatus(EIO, absl::StrCat("ucs_rcache_create failed: status ", status));
  return cache;
}

UcxRcache::~UcxRcache() {
  if (rcache_ != nullptr) api_.rcache_destroy(rcache_);
}

absl::StatusOr<Driver::Lease> UcxDriver::Get(void* addr, size_t length, int) {
  ucs_rcache_region_t* region = nullptr;
  ucs_status_t status =
      cache_->api().rcache_get(cache_->rcache(), addr, length, UcxRcache::Prot(), nullptr, &region);
  if (status != UCS_OK) {
    return ErrnoStatus(status == UCS_ERR_NO_MEMORY ? ENOMEM : EIO,
                       absl::StrCat("ucs_rcache_get(", length, " bytes) failed: status ", status));
  }
  const auto* r = reinterpret_cast<const UcxRegion*>(region);
  Lease lease;
  lease.handle = region;
  lease.region_addr = reinterpret_cast<uintptr_t>(r->reg.addr);
  lease.region_length = r->reg.length;
  return lease;
}

absl::Status UcxDriver::Put(const Lease& lease) {
  cache_->api().rcache_region_put(cache_->rcache(),
                                  static_cast<ucs_rcache_region_t*>(lease.handle));
  return absl::OkStatus();
}

absl::Status UcxDriver::DeviceWrite(const Lease& lease, size_t offset, const void* src,
                                    size_t length) {
  const auto* r = static_cast<const UcxRegion*>(lease.handle);
  return cache_->registrar().DeviceWrite(r->reg, offset, src, length);
}

absl::Status UcxDriver::Release(void* addr, size_t length) {
  cache_->api().vm_munmap(addr, length);
  return absl::OkStatus();
}

absl::Status UcxDriver::Finish() {
  cache_.reset();
  return absl::OkStatus();
}

}  // namespace mrbench
