// registration_checks.h: the argument checks every registrar shares.
//
// One place states what a registrar must reject before it touches the kernel or
// a device, so that uring, sim and verbs agree on errnos and messages:
//  - CheckRegisterArgs: len == 0 or addr + len overflowing -> EINVAL; access
//    rejected by ValidateAccess -> EINVAL.
//  - CheckDeviceRange: [offset, offset + len) must lie inside the registration
//    -> EINVAL otherwise (0 bytes at offset == length is inside).
//  - CheckMapped: every page of [addr, addr + len) is mapped -> EFAULT otherwise
//    (mincore's ENOMEM); correct for ranges that are only partly unmapped. It
//    says nothing about protection: a PROT_NONE page counts as mapped.
//  - CheckRegionLimit: len above the registrar's max_region_bytes() -> EINVAL,
//    logged, naming the limit (never a shorter registration).
// None of them allocates on the heap or takes a lock, except to report a
// failure.
#ifndef MRCACHE_REGISTRATION_CHECKS_H_
#define MRCACHE_REGISTRATION_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mrcache/registrar.h"

namespace mrcache {

// Pages are counted in 4 KiB units by every cost model and message.
constexpr size_t kSmallPage = 4096;

absl::Status CheckRegisterArgs(const void* addr, size_t length, int access);

absl::Status CheckDeviceRange(const Registration& reg, size_t offset, size_t length);

absl::Status CheckMapped(const void* addr, size_t length);

// OK when `limit` is 0 (no limit) or `length` is at most `limit` bytes; else
// EINVAL with a message, also logged as an error, that names the limit as
// `limit_name` says (e.g. "the device's max_mr_size (mlx5_0)").
absl::Status CheckRegionLimit(const void* addr, size_t length, size_t limit,
                              absl::string_view limit_name);

// RLIMIT_MEMLOCK's soft limit as text ("8388608 bytes", "unlimited"), for the
// messages of registrars whose pinning counts against it.
std::string MemlockLimitText();

// How many 4 KiB pages [addr, addr + length) touches (0 for length 0).
// Precondition: addr + length does not overflow.
size_t PagesSpanned(const void* addr, size_t length);

}  // namespace mrcache

#endif  // MRCACHE_REGISTRATION_CHECKS_H_
