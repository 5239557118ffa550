#include "bench/none_driver.h"

#include <unistd.h>

#include <memory>

namespace mrbench {

void PageAlign(const void* addr, size_t length, uintptr_t* start, uintptr_t* end) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  *start = a & ~(page - 1);
  *end = (a + length + page - 1) & ~(page - 1);
}

absl::StatusOr<Driver::Lease> NoneDriver::Get(void* addr, size_t length, int access) {
  uintptr_t start, end;
  PageAlign(addr, length, &start, &end);
  absl::StatusOr<mrcache::Registration> reg =
      registrar_.Register(reinterpret_cast<void*>(start), end - start, access);
  if (!reg.ok()) return reg.status();
  auto held = std::make_unique<mrcache::Registration>(*reg);
  Lease lease;
  lease.region_addr = reinterpret_cast<uintptr_t>(held->addr);
  lease.region_length = held->length;
  lease.handle = held.release();
  return lease;
}

absl::Status NoneDriver::Put(const Lease& lease) {
  std::unique_ptr<mrcache::Registration> held(static_cast<mrcache::Registration*>(lease.handle));
  return registrar_.Deregister(*held);
}

absl::Status NoneDriver::DeviceWrite(const Lease& lease, size_t offset, const void* src,
                                     size_t length) {
  return registrar_.DeviceWrite(*static_cast<const mrcache::Registration*>(lease.handle), offset,
                                src, length);
}

}  // namespace mrbench
