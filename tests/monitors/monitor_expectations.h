// monitor_expectations.h: which rows (ways memory disappears) each monitor is
// expected to report in this environment (glibc 2.36, Linux 6.18, root).
// Derived from how each monitor works (DESIGN.md sections 4 and 5):
//  - symbols sees calls that go through symbol lookup: not glibc's internal
//    munmap in free(), not raw syscall(2).
//  - patch sees every call that enters libc's entry points, including
//    glibc-internal ones; not raw syscall(2).
//  - uffd sees what the kernel does to registered ranges, raw syscalls
//    included; SysV shm attachments cannot be registered and shmdt sends no
//    event. The kernel sends no event either when shmat(SHM_REMAP) replaces a
//    registered range (do_shmat maps without the unmap-event list), nor when
//    truncation or fallocate drops a shared file's pages under a registered
//    mapping (only madvise sends UFFD_EVENT_REMOVE).
//  - jemalloc sees only jemalloc's own extent operations.
//  - auto is patch+uffd(+jemalloc) here and must cover every row.
#ifndef TESTS_MONITORS_MONITOR_EXPECTATIONS_H_
#define TESTS_MONITORS_MONITOR_EXPECTATIONS_H_

#include <cerrno>
#include <string>

#include "absl/status/status.h"
#include "mrcache/errno_status.h"

namespace mrcache {
namespace testing {

// ENOTSUP from AcquireMonitor: the monitor cannot exist in this build (patch
// under ThreadSanitizer); tests of it are skipped, not failed.
inline bool MonitorUnavailable(const absl::Status& s) {
  return !s.ok() && StatusToErrno(s) == ENOTSUP;
}

// Rows whose release reaches no userfaultfd event (see above).
inline bool UffdSendsNoEvent(const std::string& way) {
  return way == "shmdt" || way == "shmat_remap" || way == "memfd_ftruncate" ||
         way == "shm_open_ftruncate" || way == "shm_open_truncate" || way == "memfd_punch_hole";
}

inline bool ExpectReported(const std::string& monitor, const std::string& way) {
  if (monitor == "none") return false;
  if (monitor == "auto") return true;
  if (monitor == "symbols") {
    return way != "glibc_free" && way != "raw_munmap";
  }
  if (monitor == "patch") return way != "raw_munmap";
  if (monitor == "uffd") return !UffdSendsNoEvent(way);
  if (monitor == "jemalloc") return way == "jemalloc_purge";
  return false;
}

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_MONITOR_EXPECTATIONS_H_
