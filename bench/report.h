// report.h: mrbench's results, as an aligned table and as JSON.
//
// One Row per (workload, configuration, capacity). The JSON output is an
// array of objects with at least these keys (docs/man/mrbench.1): config, workload,
// hit_rate, registrations, registered_bytes, registrar_seconds,
// peak_pinned_bytes, ns_per_op, stale (plus transfers, max_regions,
// total_seconds = registrar_seconds + ns_per_op x transfers, the time the
// registrar and the cache took together, and error for a configuration that
// failed). Values a configuration cannot
// have (registrar time, ns per op and stale for `belady-nomerge`, which is
// computed rather than run; everything but the names for a failed run) are
// null in JSON and "-" in the table.
#ifndef BENCH_REPORT_H_
#define BENCH_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mrbench {

struct Row {
  std::string config;
  std::string workload;
  size_t max_regions = 0;
  uint64_t transfers = 0;
  uint64_t hits = 0;
  uint64_t registrations = 0;
  uint64_t registered_bytes = 0;
  uint64_t peak_pinned_bytes = 0;
  double registrar_seconds = 0;
  // Deregistrations made off the workload's thread (async_dereg's background
  // thread) and their registrar time, in neither registrar_seconds nor
  // total_seconds: what async_dereg moved off the application's path.
  uint64_t background_deregistrations = 0;
  double background_registrar_seconds = 0;
  double ns_per_op = 0;
  uint64_t stale = 0;
  bool timed = true;      // false: registrar_seconds, ns_per_op and stale do not apply
  bool verified = false;  // stale was measured (--verify)
  std::string error;      // non-empty: the run failed, only the names are valid

  double hit_rate() const { return transfers == 0 ? 0 : double(hits) / double(transfers); }
  // Registrar time plus cache time (ns_per_op x transfers), in seconds.
  double total_seconds() const { return registrar_seconds + ns_per_op * double(transfers) / 1e9; }
};

// Column-aligned, one line per row, with a header.
void PrintTable(const std::vector<Row>& rows, std::FILE* out);
std::string ToJson(const std::vector<Row>& rows);
absl::Status WriteJson(const std::string& path, const std::vector<Row>& rows);

// "1.5 MiB"-style sizes for the table.
std::string HumanBytes(uint64_t bytes);

}  // namespace mrbench

#endif  // BENCH_REPORT_H_
