// none_driver.h: the `none` configuration, what legacy applications do.
//
// Every transfer registers its page-aligned range directly on the registrar
// and deregisters it right after: no cache, nothing to invalidate, never
// stale. It is the baseline the registrar-time ratios are taken against.
#ifndef BENCH_NONE_DRIVER_H_
#define BENCH_NONE_DRIVER_H_

#include "bench/replay.h"
#include "mrcache/registrar.h"

namespace mrbench {

class NoneDriver : public Driver {
 public:
  // `registrar` must outlive the driver.
  explicit NoneDriver(mrcache::Registrar& registrar) : registrar_(registrar) {}
  absl::StatusOr<Lease> Get(void* addr, size_t length, int access) override;
  absl::Status Put(const Lease& lease) override;
  absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src,
                           size_t length) override;
  absl::Status Release(void*, size_t) override { return absl::OkStatus(); }
  absl::Status Finish() override { return absl::OkStatus(); }

 private:
  mrcache::Registrar& registrar_;
};

// The page-aligned range covering [addr, addr+length).
void PageAlign(const void* addr, size_t length, uintptr_t* start, uintptr_t* end);

}  // namespace mrbench

#endif  // BENCH_NONE_DRIVER_H_
