#include "mrcache/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"

namespace mrcache {
namespace {

constexpr char kErrnoPayloadUrl[] = "mrcache/errno";

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case EINVAL:
      return absl::StatusCode::kInvalidArgument;
    case ENOMEM:
    case EAGAIN:
    case ENOSPC:
      return absl::StatusCode::kResourceExhausted;
    case EFAULT:
      return absl::StatusCode::kOutOfRange;
    case ENOTSUP:
      return absl::StatusCode::kUnimplemented;
    case EBUSY:
      return absl::StatusCode::kFailedPrecondition;
    case ENOENT:
    case ENODEV:
      return absl::StatusCode::kNotFound;
    case EPERM:
    case EACCES:
      return absl::StatusCode::kPermissionDenied;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EINTR:
      return absl::StatusCode::kAborted;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kUnknown;
  }
}

int ErrnoForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
      return EINVAL;
    case absl::StatusCode::kResourceExhausted:
      return ENOMEM;
    case absl::StatusCode::kOutOfRange:
      return EFAULT;
    case absl::StatusCode::kUnimplemented:
      return ENOTSUP;
    case absl::StatusCode::kFailedPrecondition:
      return EBUSY;
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kPermissionDenied:
      return EPERM;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kAborted:
      return EINTR;
    case absl::StatusCode::kDeadlineExceeded:
      return ETIMEDOUT;
    default:
      return EIO;
  }
}

}  // namespace

absl::Status ErrnoStatus(int err, absl::string_view message) {
  if (err <= 0) err = EIO;
  std::string text(message);
  text += " (";
  text += std::strerror(err);
  text += ")";
  absl::Status status(CodeForErrno(err), text);
  status.SetPayload(kErrnoPayloadUrl, absl::Cord(std::to_string(err)));
  return status;
}

int StatusToErrno(const absl::Status& status) {
  if (status.ok()) return 0;
  if (auto payload = status.GetPayload(kErrnoPayloadUrl)) {
    int err = 0;
    if (absl::SimpleAtoi(std::string(*payload), &err) && err > 0) return err;
  }
  return ErrnoForCode(status.code());
}

}  // namespace mrcache
