#include "bench/report.h"

#include <cerrno>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? absl::StrCat(bytes, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

void PrintTable(const std::vector<Row>& rows, std::FILE* out) {
  for (const Row& r : rows) {
    if (r.config != "belady-nomerge") continue;
    std::fprintf(out,
                 "belady-nomerge: Belady's MIN for a cache that never merges (fewest registrations "
                 "without merging, same limits; a merging cache can do better)\n");
    break;
  }
  std::vector<std::vector<std::string>> cells = {
      {"workload", "config", "max_regions", "transfers", "hit_rate", "registrations", "registered",
       "registrar_s", "peak_pinned", "ns/op", "total_s", "stale"}};
  for (const Row& r : rows) {
    if (!r.error.empty()) {
      cells.push_back({r.workload, r.config, absl::StrCat(r.max_regions), "FAILED: " + r.error});
      continue;
    }
    cells.push_back({r.workload, r.config, absl::StrCat(r.max_regions), absl::StrCat(r.transfers),
                     absl::StrFormat("%.2f%%", 100 * r.hit_rate()), absl::StrCat(r.registrations),
                     HumanBytes(r.registered_bytes),
                     r.timed ? absl::StrFormat("%.4f", r.registrar_seconds) : "-",
                     HumanBytes(r.peak_pinned_bytes),
                     r.timed ? absl::StrFormat("%.0f", r.ns_per_op) : "-",
                     r.timed ? absl::StrFormat("%.4f", r.total_seconds()) : "-",
                     r.timed && r.verified ? absl::StrCat(r.stale) : "-"});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells) {
    if (line.size() != width.size()) continue;  // failure lines do not set widths
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (const auto& line : cells) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      // Names left-aligned, numbers right-aligned; the last cell is never padded.
      const bool last = i + 1 == line.size();
      if (i < 2) {
        text += last ? line[i] : absl::StrFormat("%-*s  ", width[i], line[i]);
      } else {
        text += last ? absl::StrFormat("%*s", width[i], line[i])
                     : absl::StrFormat("%*s  ", width[i], line[i]);
      }
    }
    std::fprintf(out, "%s\n", text.c_str());
  }
}

std::string ToJson(const std::vector<Row>& rows) {
  std::string out = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const bool ok = r.error.empty();
    auto count = [&](uint64_t v) { return ok ? absl::StrCat(v) : std::string("null"); };
    auto timed = [&](double v) { return ok && r.timed ? JsonNumber(v) : std::string("null"); };
    absl::StrAppend(
        &out, "  {\"config\": ", JsonString(r.config), ", \"workload\": ", JsonString(r.workload),
        ", \"max_regions\": ", r.max_regions, ", \"transfers\": ", count(r.transfers),
        ", \"hit_rate\": ", ok ? JsonNumber(r.hit_rate()) : "null",
        ", \"registrations\": ", count(r.registrations),
        ", \"registered_bytes\": ", count(r.registered_bytes),
        ", \"registrar_seconds\": ", timed(r.registrar_seconds),
        ", \"peak_pinned_bytes\": ", count(r.peak_pinned_bytes),
        ", \"ns_per_op\": ", timed(r.ns_per_op), ", \"total_seconds\": ", timed(r.total_seconds()),
        ", \"stale\": ", ok && r.timed && r.verified ? absl::StrCat(r.stale) : "null",
        ", \"background_deregistrations\": ",
        r.timed ? count(r.background_deregistrations) : "null",
        ", \"background_registrar_seconds\": ", timed(r.background_registrar_seconds));
    if (!ok) absl::StrAppend(&out, ", \"error\": ", JsonString(r.error));
    absl::StrAppend(&out, i + 1 == rows.size() ? "}\n" : "},\n");
  }
  return out + "]\n";
}

absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return mrcache::ErrnoStatus(errno ? errno : EIO, absl::StrCat("cannot write ", path));
  out << ToJson(rows);
  out.close();
  if (!out) return mrcache::ErrnoStatus(EIO, absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace mrbench
