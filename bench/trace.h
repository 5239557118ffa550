// trace.h: the one representation of a workload that mrbench replays.
//
// A trace is a sequence of operations on numbered buffers:
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
#ifndef BENCH_TRACE_H_
#define BENCH_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mrbench {

constexpr int kDefaultAccess = 7;  // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ

struct TraceOp {
  enum Kind : uint8_t { kAlloc, kFree, kXfer };
  Kind kind = kXfer;
  uint32_t id = 0;
  int access = kDefaultAccess;  // kXfer only
  uint64_t offset = 0;          // kXfer only
  uint64_t length = 0;          // kAlloc: buffer bytes; kXfer: transfer bytes
};

struct Trace {
  std::string name;  // workload name or file name
  std::vector<TraceOp> ops;

  size_t transfers() const;
};

// Parses the text form. On the first malformed line, returns EINVAL with
// "<name>:<line>: <reason>" and no trace.
absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view name);
// Reads and parses a file (ENOENT etc. for an unreadable file).
absl::StatusOr<Trace> ReadTraceFile(const std::string& path);

// The text form, which ParseTrace reads back to an equal trace.
std::string FormatTrace(const Trace& trace);

// Checks the invariants above; the error names the operation's index (1-based).
absl::Status ValidateTrace(const Trace& trace);

// Builds a trace while keeping it valid by construction.
class TraceBuilder {
 public:
  explicit TraceBuilder(std::string name) { trace_.name = std::move(name); }
  void Alloc(uint32_t id, uint64_t bytes) { trace_.ops.push_back({TraceOp::kAlloc, id, 0, 0, bytes}); }
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
