// trace.h: the one representation of a workload that mrbench replays.
//
// Two text formats parse to a Trace (both are documented in mrbench(1)).
//
// 1. Workload traces: a sequence of operations on numbered buffers:
//   alloc ID BYTES               allocate buffer ID (malloc) of BYTES > 0 bytes
//   free ID                      free it
//   xfer ID OFFSET LENGTH [ACCESS]  one transfer of [OFFSET, OFFSET+LENGTH) of
//                                buffer ID: get, (verify), put. ACCESS is the
//                                IBV_ACCESS_* bits, default 7.
// Blank lines and everything after '#' are ignored. IDs are non-negative
// integers below 2^32.
//
// Invariants of a Trace returned by ParseTrace or built with TraceBuilder
// (Validate checks them): an ID is allocated only while it is not live, freed
// and transferred only while it is live; every transfer has LENGTH > 0 and
// lies inside its buffer; ACCESS passes ValidateAccess. Buffers still live at
// the end are freed by the replayer. Built-in workloads produce Traces through
// TraceBuilder, so a file trace and a built-in one take the same code path.
//
// 2. Recorded traces (the shim's MRCACHE_RECORD / mrcache-run --record
// stream, interpose/recorder.h), recognised by their first line:
//   # mrcache-record 1                  format and version (only 1 exists)
//   config KEY=VALUE ...                the recording shim's configuration:
//                                       mrcache::Config keys, at most once,
//                                       before any event
//   reg ID ADDR LENGTH ACCESS           the application registered
//                                       [ADDR, ADDR+LENGTH) and holds it
//   dereg ID                            ... until it deregistered it
//   release ADDR LENGTH                 a memory monitor reported the range
//                                       released (munmap, free, madvise, ...)
// ID is a decimal integer (unique among live registrations), ADDR 0x-prefixed
// hexadecimal, LENGTH (> 0) and ACCESS decimal. '#' comments and blank lines
// as above. Invariants: a reg ID is not live, a dereg ID is; ADDR+LENGTH does
// not overflow; ACCESS passes ValidateAccess. Registrations still live at the
// end are deregistered by the replayer. IDs are renumbered densely on
// parsing (TraceOp::id). A release may be reported twice (before and after
// the system call); replaying it twice is harmless.
#ifndef BENCH_TRACE_H_
#define BENCH_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mrcache/config.h"

namespace mrbench {

constexpr int kDefaultAccess = 7;  // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ

struct TraceOp {
  // kAlloc, kFree, kXfer: workload traces. kReg, kDereg, kRelease: recorded ones.
  enum Kind : uint8_t { kAlloc, kFree, kXfer, kReg, kDereg, kRelease };
  Kind kind = kXfer;
  uint32_t id = 0;              // buffer (workload) or registration (recorded)
  int access = kDefaultAccess;  // kXfer, kReg
  uint64_t offset = 0;          // kXfer: offset in the buffer; kReg, kRelease: recorded address
  uint64_t length = 0;          // kAlloc: buffer bytes; kXfer, kReg, kRelease: bytes
};

struct Trace {
  std::string name;  // workload name or file name
  std::vector<TraceOp> ops;
  // Recorded traces only: the format's version (0 = a workload trace) and
  // the recording shim's configuration (the library's defaults, then the config line).
  int recorded_version = 0;
  mrcache::Config recorded_config;

  bool recorded() const { return recorded_version != 0; }
  // Transfers (workload) or registrations (recorded): the replay's accesses.
  size_t transfers() const;
};

// Parses either text form (a recorded trace if the first line is
// "# mrcache-record N"). On the first malformed line, returns EINVAL with
// "<name>:<line>: <reason>" and no trace; an unknown version is EINVAL too.
absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view name);
// Reads and parses a file (ENOENT etc. for an unreadable file).
absl::StatusOr<Trace> ReadTraceFile(const std::string& path);

// The text form, which ParseTrace reads back to an equal trace (recorded
// traces: with IDs as renumbered and every configuration key written).
std::string FormatTrace(const Trace& trace);

// Checks the invariants above; the error names the operation's index (1-based).
absl::Status ValidateTrace(const Trace& trace);

// Builds a trace while keeping it valid by construction.
class TraceBuilder {
 public:
  explicit TraceBuilder(std::string name) { trace_.name = std::move(name); }
  void Alloc(uint32_t id, uint64_t bytes) {
    trace_.ops.push_back({TraceOp::kAlloc, id, 0, 0, bytes});
  }
  void Free(uint32_t id) { trace_.ops.push_back({TraceOp::kFree, id, 0, 0, 0}); }
  void Xfer(uint32_t id, uint64_t offset, uint64_t length, int access = kDefaultAccess) {
    trace_.ops.push_back({TraceOp::kXfer, id, access, offset, length});
    ++transfers_;
  }
  size_t transfers() const { return transfers_; }
  Trace Finish() { return std::move(trace_); }

 private:
  Trace trace_;
  size_t transfers_ = 0;
};

}  // namespace mrbench

#endif  // BENCH_TRACE_H_
