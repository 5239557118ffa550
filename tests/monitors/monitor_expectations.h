// monitor_expectations.h: which rows (ways memory disappears) each monitor is
// expected to report in this environment (glibc 2.36, Linux 6.18, root).
// Derived from how each monitor works (docs/ARCHITECTURE.md, "How hook monitors keep it" and
// "Monitors that report after the fact"):
//  - symbols sees calls that go through symbol lookup: not glibc's internal
//    munmap in free(), not glibc's syscall() function (not interposed: see
//    symbols_monitor.h), not an inline `syscall` instruction.
//  - patch sees every call that enters libc's entry points, including
//    glibc-internal ones and syscall(); not an inline `syscall` instruction.
//  - uffd sees what the kernel does to registered ranges, inline system
//    calls included; SysV shm attachments cannot be registered and shmdt sends no
//    event. The kernel sends no event either when shmat(SHM_REMAP) replaces a
//    registered range (do_shmat maps without the unmap-event list), nor when
//    truncation or fallocate drops a shared file's pages under a registered
//    mapping (only madvise sends UFFD_EVENT_REMOVE).
//  - dlclose: the loader unmaps with its own system calls; patch and symbols
//    hook dlclose itself (loader_releases.h), uffd gets the UNMAP event.
//  - jemalloc sees only jemalloc's own extent operations.
//  - auto is patch(+jemalloc) here and must cover every row that goes
//    through libc: all but raw_munmap. auto+uffd covers every row. (Under
//    ThreadSanitizer patch cannot install: auto is symbols, auto+uffd
//    symbols+uffd, and they are expected to cover what those cover.) In a
//    sanitizer build auto adds uffd itself (monitor.h), so it covers what
//    auto+uffd covers.
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

// False where `patch` refuses to install in every process (ThreadSanitizer
// builds, patch_monitor.h); `auto` is then `symbols`.
inline bool PatchInThisBuild() {
#if defined(__SANITIZE_THREAD__)
  return false;
#else
  return true;
#endif
}

// True in a sanitizer build, where `auto` adds uffd (monitor.h).
inline bool AutoHasUffdInThisBuild() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

inline bool ExpectReported(const std::string& monitor, const std::string& way) {
  if (monitor == "none") return false;
  if (monitor == "auto") {
    return ExpectReported(PatchInThisBuild() ? "patch" : "symbols", way) ||
           (AutoHasUffdInThisBuild() && ExpectReported("uffd", way));
  }
  if (monitor == "auto+uffd") return ExpectReported("auto", way) || ExpectReported("uffd", way);
  if (monitor == "symbols") {
    return way != "glibc_free" && way != "syscall_munmap" && way != "raw_munmap";
  }
  if (monitor == "patch") return way != "raw_munmap";
  if (monitor == "uffd") return !UffdSendsNoEvent(way);
  if (monitor == "jemalloc") return way == "jemalloc_purge";
  return false;
}

// True where `monitor` reports `way` before the memory is released, so that
// no other thread can map the addresses first: the hook monitors' rows
// (patch, symbols, jemalloc). A row only uffd reports is reported after the
// fact (docs/ARCHITECTURE.md, "Monitors that report after the fact"), so
// another thread may map the freed addresses and get them before the report.
inline bool ExpectReportedBeforeRelease(const std::string& monitor, const std::string& way) {
  if (monitor == "uffd") return false;
  if (monitor == "auto" || monitor == "auto+uffd") {
    return ExpectReported(PatchInThisBuild() ? "patch" : "symbols", way);
  }
  return ExpectReported(monitor, way);
}

// A monitor name as a test name part ('+' is not allowed there).
inline std::string MonitorTestName(const std::string& monitor) {
  std::string out;
  for (char c : monitor) {
    if (c == '+') {
      out += "_plus_";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_MONITOR_EXPECTATIONS_H_
