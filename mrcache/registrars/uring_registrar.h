// uring_registrar.h: io_uring fixed buffers as a registrar (real kernel pinning).
//
// Two rings per registrar (uring_rings.h), each with a sparse fixed-buffer
// table of config.uring_slots entries (IORING_REGISTER_BUFFERS2 +
// IORING_RSRC_REGISTER_SPARSE). Register takes a free slot and installs the
// buffer at that index of the least busy ring's table with
// IORING_REGISTER_BUFFERS_UPDATE: the kernel pins the pages with the same
// long-term GUP that ibv_reg_mr uses. Deregister installs an empty iovec in
// the slot on the ring that holds it (unpins) and frees the slot. So a
// registration does not wait while another thread unregisters a big buffer
// (the kernel unpins under the ring's lock).
//
// Invariants:
//  - handle = slot index; lkey = rkey = slot index + 1 (0 is never a key).
//    The slot index space is the registrar's, shared by its rings.
//  - A slot is either free or holds exactly one live Registration, in the
//    table of exactly one ring (the others hold nothing at that index).
//  - Errors: len 0, wrap-around, bad access bits, more than 1 GiB in one
//    buffer -> EINVAL; IBV_ACCESS_ON_DEMAND -> ENOTSUP (no ODP here); memory
//    that is not mapped, or not writable (the kernel pins for writing) ->
//    EFAULT; table full -> ENOMEM; RLIMIT_MEMLOCK exceeded (the ring was
//    created without CAP_IPC_LOCK) -> ENOMEM naming the limit.
//  - DeviceWrite is an IORING_OP_READ_FIXED from a private memfd into the
//    slot's pinned pages: a stale registration (memory unmapped and mapped
//    again since Register) writes into the old pages, where the application
//    cannot see it. Transfers are made by one thread at a time.
//  - Destroying the registrar with slots still registered is a caller bug: it
//    unregisters them and reports the count on stderr.
#ifndef MRCACHE_URING_REGISTRAR_H_
#define MRCACHE_URING_REGISTRAR_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

// The kernel's per-buffer limit for fixed buffers.
constexpr size_t kUringMaxBufferBytes = size_t{1} << 30;
// The kernel's limit on the fixed-buffer table size (IORING_MAX_REG_BUFFERS).
constexpr size_t kUringMaxSlots = 16384;

// True if io_uring with sparse fixed-buffer tables works in this process.
// Probed once; the answer is cached.
bool UringAvailable();

// ENOTSUP (with the reason) where io_uring is unavailable; EINVAL if
// config.uring_slots is 0 or above kUringMaxSlots.
absl::StatusOr<std::unique_ptr<Registrar>> MakeUringRegistrar(const Config& config);

// Counters of a uring registrar (for tests and diagnostics).
struct UringRegistrarStats {
  uint64_t registrations = 0;    // successful Register calls
  uint64_t deregistrations = 0;  // Deregister calls that released a slot
  uint64_t live = 0;             // slots registered now
  uint64_t slots = 0;            // table size
  uint64_t rings = 0;            // rings the slots are spread over
  uint64_t unregistering = 0;    // Deregister calls inside the kernel now
};
// nullopt if `registrar` is not a uring registrar.
absl::optional<UringRegistrarStats> GetUringRegistrarStats(const Registrar& registrar);

// The reverse of DeviceWrite: reads `length` bytes at reg.addr + offset through
// the registration's pinned pages (IORING_OP_WRITE_FIXED into the memfd), so a
// test can see where a stale device write landed. EINVAL if `registrar` is not
// a uring registrar or the range is outside the registration.
absl::Status UringDeviceRead(Registrar& registrar, const Registration& reg, size_t offset,
                             void* dst, size_t length);

}  // namespace mrcache

#endif  // MRCACHE_URING_REGISTRAR_H_
