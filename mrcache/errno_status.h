// errno_status.h: absl::Status values that carry an errno.
//
// mrcache's C API returns errno values and its C++ API returns absl::Status.
// Every Status that crosses the boundary is made by ErrnoStatus(), which keeps
// the exact errno as a payload beside a human-readable message, so that the C
// API returns precisely the errno the failing layer saw (ENOMEM, EAGAIN, EFAULT,
// EINVAL, ...), and the C++ API keeps a message that says what was wrong.
//
// Invariant: StatusToErrno(ErrnoStatus(e, msg)) == e for every e > 0, and
// StatusToErrno(OkStatus()) == 0. A Status made elsewhere maps through its code.
#ifndef MRCACHE_ERRNO_STATUS_H_
#define MRCACHE_ERRNO_STATUS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace mrcache {

// A non-OK Status whose code matches `err` (EINVAL -> kInvalidArgument, ...) and
// whose payload records `err` itself. `err` must be > 0. Cold: the compiler
// moves every caller's error path out of its hot code.
__attribute__((cold)) absl::Status ErrnoStatus(int err, absl::string_view message);

// The errno a Status stands for: its payload if ErrnoStatus made it, else a
// value derived from its code. 0 for OK.
int StatusToErrno(const absl::Status& status);

}  // namespace mrcache

#endif  // MRCACHE_ERRNO_STATUS_H_
