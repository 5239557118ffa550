#include "bench/trace.h"

#include <cerrno>
#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

// Parses a non-negative decimal integer (no sign, no suffix).
bool ParseU64(absl::string_view field, uint64_t* out) {
  if (field.empty() || field[0] == '+' || field[0] == '-') return false;
  return absl::SimpleAtoi(field, out);
}

using LiveBuffers = absl::flat_hash_map<uint32_t, uint64_t>;

// What is wrong with `op` given the buffers live so far ("" if nothing);
// updates `live_bytes` (0 = not live).
std::string CheckOp(const TraceOp& op, LiveBuffers* live_bytes) {
  uint64_t& bytes = (*live_bytes)[op.id];
  switch (op.kind) {
    case TraceOp::kAlloc:
      if (op.length == 0) return "alloc of 0 bytes";
      if (bytes != 0) return absl::StrCat("buffer ", op.id, " is already allocated");
      bytes = op.length;
      return "";
    case TraceOp::kFree:
      if (bytes == 0) return absl::StrCat("free of buffer ", op.id, ", which is not allocated");
      bytes = 0;
      return "";
    case TraceOp::kXfer: {
      if (bytes == 0) return absl::StrCat("xfer on buffer ", op.id, ", which is not allocated");
      if (op.length == 0) return "xfer of 0 bytes";
      if (op.offset > bytes || op.length > bytes - op.offset) {
        return absl::StrCat("xfer [", op.offset, ", ", op.offset + op.length, ") is outside buffer ", op.id,
                            " of ", bytes, " bytes");
      }
      absl::Status access = mrcache::ValidateAccess(op.access);
      if (!access.ok()) return absl::StrCat("bad access ", op.access, ": ", access.message());
      return "";
    }
  }
  return "unknown operation";
}

// Parses one non-empty, comment-free line into `op`; returns the reason on failure.
std::string ParseLine(absl::string_view line, TraceOp* op) {
  std::vector<absl::string_view> f = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
  const absl::string_view verb = f[0];
  size_t min_fields, max_fields;
  if (verb == "alloc") {
    op->kind = TraceOp::kAlloc, min_fields = max_fields = 3;
  } else if (verb == "free") {
    op->kind = TraceOp::kFree, min_fields = max_fields = 2;
  } else if (verb == "xfer") {
    op->kind = TraceOp::kXfer, min_fields = 4, max_fields = 5;
  } else {
    return absl::StrCat("unknown operation '", verb, "' (expected alloc, free or xfer)");
  }
  if (f.size() < min_fields || f.size() > max_fields) {
    const char* usage = op->kind == TraceOp::kAlloc  ? "alloc ID BYTES"
                        : op->kind == TraceOp::kFree ? "free ID"
                                                     : "xfer ID OFFSET LENGTH [ACCESS]";
    return absl::StrCat("'", verb, "' takes ", usage, ", got ", f.size() - 1, " argument(s)");
  }
  uint64_t id;
  if (!ParseU64(f[1], &id) || id > UINT32_MAX) return absl::StrCat("bad buffer ID '", f[1], "'");
  op->id = static_cast<uint32_t>(id);
  if (op->kind == TraceOp::kAlloc) {
    if (!ParseU64(f[2], &op->length)) return absl::StrCat("bad byte count '", f[2], "'");
  } else if (op->kind == TraceOp::kXfer) {
    if (!ParseU64(f[2], &op->offset)) return absl::StrCat("bad offset '", f[2], "'");
    if (!ParseU64(f[3], &op->length)) return absl::StrCat("bad length '", f[3], "'");
    op->access = kDefaultAccess;
    if (f.size() == 5) {
      uint64_t access;
      if (!ParseU64(f[4], &access) || access > INT32_MAX) return absl::StrCat("bad access '", f[4], "'");
      op->access = static_cast<int>(access);
    }
  }
  return "";
}

}  // namespace

size_t Trace::transfers() const {
  size_t n = 0;
  for (const TraceOp& op : ops) n += op.kind == TraceOp::kXfer;
  return n;
}

absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view name) {
  Trace trace;
  trace.name = std::string(name);
  LiveBuffers live;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    TraceOp op;
    std::string reason = ParseLine(line, &op);
    if (reason.empty()) reason = CheckOp(op, &live);
    if (!reason.empty()) return ErrnoStatus(EINVAL, absl::StrCat(name, ":", line_no, ": ", reason));
    trace.ops.push_back(op);
  }
  return trace;
}

absl::StatusOr<Trace> ReadTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus(errno ? errno : ENOENT, absl::StrCat("cannot read trace ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return ErrnoStatus(EIO, absl::StrCat("error reading trace ", path));
  return ParseTrace(text.str(), path);
}

std::string FormatTrace(const Trace& trace) {
  std::string out = absl::StrCat("# ", trace.name, "\n");
  for (const TraceOp& op : trace.ops) {
    switch (op.kind) {
      case TraceOp::kAlloc: absl::StrAppend(&out, "alloc ", op.id, " ", op.length, "\n"); break;
      case TraceOp::kFree: absl::StrAppend(&out, "free ", op.id, "\n"); break;
      case TraceOp::kXfer:
        absl::StrAppend(&out, "xfer ", op.id, " ", op.offset, " ", op.length);
        if (op.access != kDefaultAccess) absl::StrAppend(&out, " ", op.access);
        out += '\n';
        break;
    }
  }
  return out;
}

absl::Status ValidateTrace(const Trace& trace) {
  LiveBuffers live;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    std::string reason = CheckOp(trace.ops[i], &live);
    if (!reason.empty()) return ErrnoStatus(EINVAL, absl::StrCat(trace.name, ": operation ", i + 1, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace mrbench
