#include "bench/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "interpose/record_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;
using mrcache_preload::kRecordHeader;
using mrcache_preload::kRecordHeaderPrefix;

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
        return absl::StrCat("xfer [", op.offset, ", ", op.offset + op.length,
                            ") is outside buffer ", op.id, " of ", bytes, " bytes");
      }
      absl::Status access = mrcache::ValidateAccess(op.access);
      if (!access.ok()) return absl::StrCat("bad access ", op.access, ": ", access.message());
      return "";
    }
    case TraceOp::kReg: {
      if (bytes != 0) return absl::StrCat("registration ", op.id, " is already registered");
      if (op.length == 0) return "reg of 0 bytes";
      if (op.offset + op.length < op.offset) return "reg range wraps around the address space";
      absl::Status access = mrcache::ValidateAccess(op.access);
      if (!access.ok()) return absl::StrCat("bad access ", op.access, ": ", access.message());
      bytes = op.length;
      return "";
    }
    case TraceOp::kDereg:
      if (bytes == 0)
        return absl::StrCat("dereg of registration ", op.id, ", which is not registered");
      bytes = 0;
      return "";
    case TraceOp::kRelease:
      if (op.length == 0) return "release of 0 bytes";
      if (op.offset + op.length < op.offset) return "release range wraps around the address space";
      return "";
  }
  return "unknown operation";
}

bool IsRecordedKind(TraceOp::Kind kind) {
  return kind == TraceOp::kReg || kind == TraceOp::kDereg || kind == TraceOp::kRelease;
}

// Parses "0x" followed by 1..16 hexadecimal digits.
bool ParseHexAddress(absl::string_view field, uint64_t* out) {
  if (field.size() < 3 || field.size() > 18 || field.substr(0, 2) != "0x") return false;
  uint64_t v = 0;
  for (char c : field.substr(2)) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// State of a recorded trace's parse: recorded IDs of live registrations ->
// dense IDs, and the next dense ID.
struct RecordedIds {
  absl::flat_hash_map<uint64_t, uint32_t> live;
  uint64_t next = 1;
};

// Parses one event line of a recorded trace into `op` (IDs renumbered
// through `ids`); returns the reason on failure.
std::string ParseRecordedLine(const std::vector<absl::string_view>& f, RecordedIds* ids,
                              TraceOp* op) {
  const absl::string_view verb = f[0];
  size_t fields;
  const char* usage;
  if (verb == "reg") {
    op->kind = TraceOp::kReg, fields = 5, usage = "reg ID ADDR LENGTH ACCESS";
  } else if (verb == "dereg") {
    op->kind = TraceOp::kDereg, fields = 2, usage = "dereg ID";
  } else if (verb == "release") {
    op->kind = TraceOp::kRelease, fields = 3, usage = "release ADDR LENGTH";
  } else {
    return absl::StrCat("unknown operation '", verb,
                        "' (a recorded trace has config, reg, dereg and release)");
  }
  if (f.size() != fields)
    return absl::StrCat("'", verb, "' takes ", usage, ", got ", f.size() - 1, " argument(s)");
  if (op->kind == TraceOp::kRelease) {
    if (!ParseHexAddress(f[1], &op->offset))
      return absl::StrCat("bad address '", f[1], "' (expected 0x...)");
    if (!ParseU64(f[2], &op->length)) return absl::StrCat("bad length '", f[2], "'");
    return "";
  }
  uint64_t id;
  if (!ParseU64(f[1], &id)) return absl::StrCat("bad registration ID '", f[1], "'");
  if (op->kind == TraceOp::kDereg) {
    auto it = ids->live.find(id);
    if (it == ids->live.end())
      return absl::StrCat("dereg of registration ", id, ", which is not registered");
    op->id = it->second;
    ids->live.erase(it);
    return "";
  }
  if (!ParseHexAddress(f[2], &op->offset))
    return absl::StrCat("bad address '", f[2], "' (expected 0x...)");
  if (!ParseU64(f[3], &op->length)) return absl::StrCat("bad length '", f[3], "'");
  uint64_t access;
  if (!ParseU64(f[4], &access) || access > INT32_MAX)
    return absl::StrCat("bad access '", f[4], "'");
  op->access = static_cast<int>(access);
  if (ids->live.contains(id)) return absl::StrCat("registration ", id, " is already registered");
  if (ids->next > UINT32_MAX) return "more than 2^32 registrations";
  op->id = static_cast<uint32_t>(ids->next++);
  ids->live[id] = op->id;
  return "";
}

// Applies "config KEY=VALUE ..." to `config`; returns the reason on failure.
std::string ParseConfigLine(const std::vector<absl::string_view>& f, mrcache::Config* config) {
  for (size_t i = 1; i < f.size(); ++i) {
    const size_t eq = f[i].find('=');
    if (eq == absl::string_view::npos)
      return absl::StrCat("bad configuration entry '", f[i], "' (expected KEY=VALUE)");
    absl::Status set = config->Set(f[i].substr(0, eq), f[i].substr(eq + 1));
    if (!set.ok()) return std::string(set.message());
  }
  absl::Status valid = config->Validate();
  return valid.ok() ? "" : std::string(valid.message());
}

// Parses one non-empty, comment-free line into `op`; returns the reason on failure.
std::string ParseLine(absl::string_view line, TraceOp* op) {
  std::vector<absl::string_view> f =
      absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
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
      if (!ParseU64(f[4], &access) || access > INT32_MAX)
        return absl::StrCat("bad access '", f[4], "'");
      op->access = static_cast<int>(access);
    }
  }
  return "";
}

}  // namespace

size_t Trace::transfers() const {
  size_t n = 0;
  for (const TraceOp& op : ops) n += op.kind == TraceOp::kXfer || op.kind == TraceOp::kReg;
  return n;
}

absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view name) {
  Trace trace;
  trace.name = std::string(name);
  const absl::string_view first = text.substr(0, text.find('\n'));
  if (absl::StartsWith(first, kRecordHeaderPrefix)) {
    const absl::string_view version =
        absl::StripAsciiWhitespace(first.substr(strlen(kRecordHeaderPrefix)));
    if (version != "1") {
      return ErrnoStatus(EINVAL, absl::StrCat(name, ":1: unsupported mrcache-record version '",
                                              version, "' (this mrbench reads version 1)"));
    }
    trace.recorded_version = 1;
  }
  LiveBuffers live;
  RecordedIds ids;
  bool events_seen = false, config_seen = false;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") == absl::string_view::npos) continue;
    TraceOp op;
    std::string reason;
    if (trace.recorded()) {
      std::vector<absl::string_view> f =
          absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
      if (f[0] == "config") {
        if (config_seen || events_seen) {
          reason = config_seen ? "a second config line" : "the config line comes after events";
        } else {
          config_seen = true;
          reason = ParseConfigLine(f, &trace.recorded_config);
          if (reason.empty()) continue;
        }
      } else {
        events_seen = true;
        reason = ParseRecordedLine(f, &ids, &op);
      }
    } else {
      reason = ParseLine(line, &op);
    }
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
  std::string out =
      trace.recorded()
          ? absl::StrCat(kRecordHeader, "\n# ", trace.name, "\n",
                         mrcache_preload::RecordConfigLine(trace.recorded_config), "\n")
          : absl::StrCat("# ", trace.name, "\n");
  for (const TraceOp& op : trace.ops) {
    switch (op.kind) {
      case TraceOp::kAlloc:
        absl::StrAppend(&out, "alloc ", op.id, " ", op.length, "\n");
        break;
      case TraceOp::kFree:
        absl::StrAppend(&out, "free ", op.id, "\n");
        break;
      case TraceOp::kXfer:
        absl::StrAppend(&out, "xfer ", op.id, " ", op.offset, " ", op.length);
        if (op.access != kDefaultAccess) absl::StrAppend(&out, " ", op.access);
        out += '\n';
        break;
      case TraceOp::kReg:
        absl::StrAppend(&out, "reg ", op.id, " 0x", absl::Hex(op.offset), " ", op.length, " ",
                        op.access, "\n");
        break;
      case TraceOp::kDereg:
        absl::StrAppend(&out, "dereg ", op.id, "\n");
        break;
      case TraceOp::kRelease:
        absl::StrAppend(&out, "release 0x", absl::Hex(op.offset), " ", op.length, "\n");
        break;
    }
  }
  return out;
}

absl::Status ValidateTrace(const Trace& trace) {
  LiveBuffers live;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    std::string reason = IsRecordedKind(trace.ops[i].kind) == trace.recorded()
                             ? CheckOp(trace.ops[i], &live)
                             : (trace.recorded() ? "a workload operation in a recorded trace"
                                                 : "a recorded event in a workload trace");
    if (!reason.empty())
      return ErrnoStatus(EINVAL, absl::StrCat(trace.name, ": operation ", i + 1, ": ", reason));
  }
  return absl::OkStatus();
}

}  // namespace mrbench
