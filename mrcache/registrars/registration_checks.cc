#include "mrcache/registrars/registration_checks.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"

namespace mrcache {
namespace {

std::string RangeText(const void* addr, size_t length) {
  return absl::StrFormat("[%p, +%u)", addr, length);
}

}  // namespace

absl::Status CheckRegisterArgs(const void* addr, size_t length, int access) {
  if (length == 0) return ErrnoStatus(EINVAL, "cannot register 0 bytes");
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if (start + length < start) {
    return ErrnoStatus(
        EINVAL, absl::StrCat("range ", RangeText(addr, length), " wraps around the address space"));
  }
  return ValidateAccess(access);
}

absl::Status CheckRegionLimit(const void* addr, size_t length, size_t limit,
                              absl::string_view limit_name) {
  if (limit == 0 || length <= limit) return absl::OkStatus();
  const std::string message =
      absl::StrCat("cannot register ", RangeText(addr, length), ": ", length, " bytes exceed ",
                   limit_name, " of ", limit, " bytes");
  Log(LogLevel::kError, message);
  return ErrnoStatus(EINVAL, message);
}

absl::Status CheckDeviceRange(const Registration& reg, size_t offset, size_t length) {
  if (offset > reg.length || length > reg.length - offset) {
    return ErrnoStatus(EINVAL, absl::StrFormat("device access [%u, +%u) exceeds the %u-byte "
                                               "registration at %p",
                                               offset, length, reg.length, reg.addr));
  }
  return absl::OkStatus();
}

absl::Status CheckMapped(const void* addr, size_t length) {
  if (length == 0) return absl::OkStatus();
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  uintptr_t end = reinterpret_cast<uintptr_t>(addr) + length;
  // mincore wants one status byte per page; walk in chunks so the buffer stays
  // on the stack whatever the length.
  unsigned char vec[4096];
  const uintptr_t chunk = sizeof vec * page;
  for (uintptr_t p = start; p < end;) {
    uintptr_t n = end - p < chunk ? end - p : chunk;
    if (mincore(reinterpret_cast<void*>(p), n, vec) != 0) {
      int err = errno;
      if (err == ENOMEM) {
        return ErrnoStatus(
            EFAULT, absl::StrCat("memory ", RangeText(addr, length), " is not (entirely) mapped"));
      }
      return ErrnoStatus(
          err, absl::StrCat("mincore on ", RangeText(addr, length), ": ", std::strerror(err)));
    }
    p += n;
  }
  return absl::OkStatus();
}

std::string MemlockLimitText() {
  rlimit lim{};
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return "unknown";
  if (lim.rlim_cur == RLIM_INFINITY) return "unlimited";
  return absl::StrCat(lim.rlim_cur, " bytes");
}

size_t PagesSpanned(const void* addr, size_t length) {
  if (length == 0) return 0;
  uintptr_t start = reinterpret_cast<uintptr_t>(addr) / kSmallPage;
  uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + length - 1) / kSmallPage;
  return last - start + 1;
}

}  // namespace mrcache
