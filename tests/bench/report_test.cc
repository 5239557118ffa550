// mrbench's outputs: the JSON keys (docs/man/mrbench.1), the table, and the gnuplot figure.
#include "bench/report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/plot.h"
#include "gtest/gtest.h"

namespace mrbench {
namespace {

std::vector<Row> SampleRows() {
  Row none;
  none.config = "none";
  none.workload = "zipf";
  none.max_regions = 64;
  none.transfers = 100;
  none.registrations = 100;
  none.registered_bytes = 409600;
  none.registrar_seconds = 0.01;
  none.peak_pinned_bytes = 4096;
  none.ns_per_op = 12;
  none.verified = true;
  Row cache = none;
  cache.config = "mrcache";
  cache.hits = 90;
  cache.registrations = 10;
  cache.registrar_seconds = 0.001;
  Row optimal = cache;
  optimal.config = "belady-nomerge";
  optimal.hits = 95;
  optimal.timed = false;
  Row failed;
  failed.config = "ucx";
  failed.workload = "zipf";
  failed.error = "cannot load \"UCX\"";
  return {none, cache, optimal, failed};
}

TEST(ReportJson, EveryObjectHasTheIssueKeys) {
  const std::string json = ToJson(SampleRows());
  for (const char* key : {"config", "workload", "hit_rate", "registrations", "registered_bytes",
                          "registrar_seconds", "peak_pinned_bytes", "ns_per_op", "total_seconds",
                          "stale", "background_deregistrations", "background_registrar_seconds"}) {
    size_t count = 0;
    for (size_t pos = json.find(std::string("\"") + key + "\":"); pos != std::string::npos;
         pos = json.find(std::string("\"") + key + "\":", pos + 1)) {
      ++count;
    }
    EXPECT_EQ(count, 4u) << key;
  }
}

TEST(ReportJson, ValuesAndNulls) {
  const std::string json = ToJson(SampleRows());
  EXPECT_NE(json.find("\"config\": \"mrcache\", \"workload\": \"zipf\""), std::string::npos);
  EXPECT_NE(json.find("\"hit_rate\": 0.9,"), std::string::npos);
  // belady-nomerge is computed, not run: no registrar time, ns per op or stale count.
  EXPECT_NE(
      json.find("\"background_deregistrations\": null, \"background_registrar_seconds\": null"),
      std::string::npos);
  EXPECT_NE(
      json.find("\"registrar_seconds\": null, \"peak_pinned_bytes\": 4096, \"ns_per_op\": null, "
                "\"total_seconds\": null, \"stale\": null"),
      std::string::npos);
  EXPECT_NE(json.find("\"error\": \"cannot load \\\"UCX\\\"\""), std::string::npos);
  EXPECT_EQ(json.front(), '[');
  EXPECT_EQ(json.substr(json.size() - 2), "]\n");
}

TEST(ReportJson, TotalSecondsIsRegistrarTimePlusCacheTime) {
  // none: 0.01 s in the registrar + 12 ns x 100 transfers in the cache.
  EXPECT_DOUBLE_EQ(SampleRows()[0].total_seconds(), 0.01 + 1200e-9);
  EXPECT_NE(ToJson(SampleRows()).find("\"ns_per_op\": 12, \"total_seconds\": 0.0100012,"),
            std::string::npos);
}

// What PrintTable writes for `rows`.
std::string TableOf(const std::vector<Row>& rows) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  PrintTable(rows, out);
  std::fclose(out);
  std::string table(text, size);
  free(text);
  return table;
}

TEST(ReportTable, AlignsColumnsAndShowsFailures) {
  const std::string table = TableOf(SampleRows());
  std::istringstream lines(table);
  std::string definition, header, first;
  std::getline(lines, definition);
  std::getline(lines, header);
  std::getline(lines, first);
  EXPECT_EQ(header.size(), first.size());
  EXPECT_NE(table.find("90.00%"), std::string::npos);
  EXPECT_NE(table.find("FAILED: cannot load \"UCX\""), std::string::npos);
}

TEST(ReportTable, DefinesBeladyNomergeAboveTheTable) {
  const std::string table = TableOf(SampleRows());
  EXPECT_EQ(table.rfind("belady-nomerge: Belady's MIN for a cache that never merges", 0), 0u)
      << table;
}

TEST(ReportBytes, HumanReadable) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(3u << 20), "3.0 MiB");
}

TEST(Plot, GnuplotWritesAnSvgWithEveryPanel) {
  std::vector<Row> rows = SampleRows();
  std::vector<Row> sweep;
  for (size_t cap : {8, 16, 32}) {
    for (Row r : {rows[1], rows[2]}) {
      r.max_regions = cap;
      sweep.push_back(r);
    }
  }
  const std::string svg = ::testing::TempDir() + "/mrbench_test.svg";
  absl::Status status = PlotSvg(rows, sweep, svg);
  ASSERT_TRUE(status.ok()) << status;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("hit rate vs capacity: zipf"), std::string::npos);
  EXPECT_NE(text.find("registrar time"), std::string::npos);
  EXPECT_NE(text.find("total time (registrar + cache)"), std::string::npos);
  unlink(svg.c_str());
}

// Clusters sit at x = 0 .. workloads-1; the bar panels' x range is exactly
// that plus half a slot on each side, so no panel starts with empty space.
TEST(Plot, BarPanelsSpanTheirWorkloadsFromTheLeftEdge) {
  std::vector<Row> rows = SampleRows();
  Row other = rows[0];
  other.workload = "kv";
  rows.push_back(other);  // two workloads: zipf, kv
  const std::string script = GnuplotScript(rows, {}, "/d", "/out.svg");
  EXPECT_NE(script.find("set xrange [-0.5:1.5]"), std::string::npos) << script;
  EXPECT_NE(script.find("plot '/d/total.dat'"), std::string::npos) << script;
}

TEST(Plot, MissingGnuplotIsAClearError) {
  const char* old = getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent", 1);
  absl::Status status = PlotSvg(SampleRows(), {}, ::testing::TempDir() + "/never.svg");
  setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("gnuplot-nox"), std::string::npos) << status;
}

}  // namespace
}  // namespace mrbench
