#include "mrcache/monitor.h"

#include <cerrno>
#include <string>

#include "mrcache/errno_status.h"

namespace mrcache {
namespace {

// `none`: the caller invalidates explicitly (mrc_invalidate) or uses ODP.
class NoMonitor : public MonitorLease {
 public:
  std::string name() const override { return "none"; }
  bool blind() const override { return true; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<MonitorLease>> AcquireMonitor(absl::string_view name) {
  if (name == "none") return std::unique_ptr<MonitorLease>(new NoMonitor);
  if (name == "symbols" || name == "patch" || name == "uffd" || name == "jemalloc" ||
      name == "auto") {
    return ErrnoStatus(ENOTSUP, "monitor '" + std::string(name) + "' is not built yet");
  }
  return ErrnoStatus(EINVAL, "unknown monitor '" + std::string(name) +
                                 "' (expected none|symbols|patch|uffd|jemalloc|auto)");
}

}  // namespace mrcache
