// ucx_rcache.h: UCX's ucs_rcache over an mrcache Registrar, and its Driver.
//
// The rcache's mem_reg/mem_dereg ops call our Registrar, so UCX and mrcache
// pay the same registration costs and are counted by the same wrapper. Like
// a UCX memory domain, every region is registered with one fixed access
// (the union of what the workload asks for): ucs_rcache matches regions by
// PROT_* bits, not by IBV access, so per-request access would let a hit
// return a region without the remote rights the request needs.
//
// Regions are aligned to 64 bytes, UCX's InfiniBand default, not to pages:
// a free therefore drops only regions overlapping the freed bytes, whereas a
// page-aligned cache also drops a neighbour's region that shares a page with
// the freed buffer (both are correct; the finer one keeps more hits).
//
// Limits map one to one: max_regions -> params.max_regions, max_bytes ->
// params.max_size (0 = unlimited for both, as in mrcache). Release(addr, len)
// reports the range with ucm_vm_munmap (see ucs_api.h), so ucs_rcache drops
// overlapping regions before the next get, exactly when mrcache's
// mrc_invalidate would.
#ifndef BENCH_UCX_RCACHE_H_
#define BENCH_UCX_RCACHE_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "bench/replay.h"
#include "bench/ucs_api.h"
#include "mrcache/registrar.h"

namespace mrbench {

// An ucs_rcache whose regions carry our Registration.
struct UcxRegion {
  ucs_rcache_region_t super;  // first: ucs_rcache allocates region_struct_size bytes
  mrcache::Registration reg;
};

class UcxRcache {
 public:
  // `registrar` must outlive the cache.
  static absl::StatusOr<std::unique_ptr<UcxRcache>> Create(const UcsApi& api,
                                                           mrcache::Registrar& registrar,
                                                           size_t max_regions, size_t max_bytes,
                                                           int access);
  ~UcxRcache();  // ucs_rcache_destroy: deregisters every region
  UcxRcache(const UcxRcache&) = delete;
  UcxRcache& operator=(const UcxRcache&) = delete;

  const UcsApi& api() const { return api_; }
  ucs_rcache_t* rcache() const { return rcache_; }
  mrcache::Registrar& registrar() const { return registrar_; }
  int access() const { return access_; }
  // The PROT_* bits to pass to ucs_rcache_get.
  static int Prot() { return PROT_READ | PROT_WRITE; }

 private:
  UcxRcache(const UcsApi& api, mrcache::Registrar& registrar, int access)
      : api_(api), registrar_(registrar), access_(access) {}
  const UcsApi& api_;
  mrcache::Registrar& registrar_;
  const int access_;
  ucs_rcache_t* rcache_ = nullptr;
};

// The `ucx` configuration.
class UcxDriver : public Driver {
 public:
  explicit UcxDriver(std::unique_ptr<UcxRcache> cache) : cache_(std::move(cache)) {}
  absl::StatusOr<Lease> Get(void* addr, size_t length, int access) override;
  absl::Status Put(const Lease& lease) override;
  absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src,
                           size_t length) override;
  absl::Status Release(void* addr, size_t length) override;
  absl::Status Finish() override;

 private:
  std::unique_ptr<UcxRcache> cache_;
};

}  // namespace mrbench

#endif  // BENCH_UCX_RCACHE_H_
