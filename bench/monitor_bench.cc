// monitor_bench: the overhead each memory monitor adds to an unrelated 4 KiB
// mmap+munmap pair (memory no cache has registered), as a ratio to no
// monitor, measured in the same run.
//
// Each benchmark holds one cache (sim registrar) created with the monitor
// under test, so every report goes through the real listener path (the
// cache's bounded invalidation ring). After the runs, one line per monitor:
//   ratio <monitor>/none = <real-time ratio> (cpu <cpu-time ratio>)
// (means of 5 repetitions; on a shared machine the CPU-time ratio is the
// steadier of the two).
// Target (bench/RESULTS.md): <= 1.10 for symbols and patch.
//
// BM_MissWithMonitor: what a monitor adds to a cache miss. get+put that
// always misses (4,096 one-page ranges, a page apart in one mapping, cycled
// through a 64-region cache, so every miss also evicts one region) with the
// sim registrar at 0 ns, max_merge_bytes=0 and bridge_bytes=0: the cache's
// own cost plus the monitor's Watch and Unwatch (uffd) per miss. Labelled
// "miss <monitor>".
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "mrcache/mrcache.h"

namespace {

// uffd only with a monitor that reports releases first: a cache refuses it alone.
const char* const kMonitors[] = {"none", "symbols", "patch", "symbols+uffd", "auto"};

void BM_MmapMunmap4K(benchmark::State& state) {
  const char* monitor = kMonitors[state.range(0)];
  mrc_config_t* cfg = nullptr;
  mrc_cache_t* cache = nullptr;
  if (mrc_config_create(&cfg) != 0 || mrc_config_set(cfg, "registrar", "sim") != 0 ||
      mrc_config_set(cfg, "monitor", monitor) != 0 || mrc_cache_create(cfg, nullptr, &cache) != 0) {
    state.SkipWithError("cannot create a cache with this monitor");
    if (cfg != nullptr) mrc_config_destroy(cfg);
    return;
  }
  mrc_config_destroy(cfg);
  for (auto _ : state) {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    benchmark::DoNotOptimize(p);
    munmap(p, 4096);
  }
  state.SetLabel(monitor);
  mrc_cache_destroy(cache);
}
BENCHMARK(BM_MmapMunmap4K)->DenseRange(0, 4)->Repetitions(5)->ReportAggregatesOnly(true);

void BM_MissWithMonitor(benchmark::State& state) {
  const char* monitor = kMonitors[state.range(0)];
  constexpr size_t kPage = 4096, kRanges = 4096;
  mrc_config_t* cfg = nullptr;
  mrc_cache_t* cache = nullptr;
  if (mrc_config_create(&cfg) != 0 || mrc_config_set(cfg, "registrar", "sim") != 0 ||
      mrc_config_set(cfg, "sim_base_ns", "0") != 0 ||
      mrc_config_set(cfg, "sim_page_ns", "0") != 0 ||
      mrc_config_set(cfg, "max_merge_bytes", "0") != 0 ||
      mrc_config_set(cfg, "bridge_bytes", "0") != 0 ||
      mrc_config_set(cfg, "max_regions", "64") != 0 ||
      mrc_config_set(cfg, "monitor", monitor) != 0 || mrc_cache_create(cfg, nullptr, &cache) != 0) {
    state.SkipWithError("cannot create a cache with this monitor");
    if (cfg != nullptr) mrc_config_destroy(cfg);
    return;
  }
  mrc_config_destroy(cfg);
  char* arena = static_cast<char*>(mmap(nullptr, 2 * kRanges * kPage, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (arena == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    mrc_cache_destroy(cache);
    return;
  }
  size_t i = 0;
  for (auto _ : state) {
    mrc_region_t* region = nullptr;
    if (mrc_get(cache, arena + 2 * i * kPage, kPage, 7, &region) != 0) {
      state.SkipWithError("mrc_get failed");
      break;
    }
    mrc_put(cache, region);
    if (++i == kRanges) i = 0;
  }
  mrc_stats_t stats;
  mrc_stats(cache, &stats);
  state.counters["misses"] = static_cast<double>(stats.misses);
  state.SetLabel(std::string("miss ") + monitor);
  mrc_cache_destroy(cache);
  munmap(arena, 2 * kRanges * kPage);
}
BENCHMARK(BM_MissWithMonitor)->Arg(0)->Arg(2)->Arg(3)->Repetitions(5)->ReportAggregatesOnly(true);

// Console output as usual; remembers each monitor's mean for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.aggregate_name == "mean") {
        means_[run.report_label] = {run.GetAdjustedRealTime(), run.GetAdjustedCPUTime()};
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void PrintRatios() const {
    auto base = means_.find("none");
    if (base == means_.end() || base->second.first <= 0 || base->second.second <= 0) return;
    for (const char* m : kMonitors) {
      auto it = means_.find(m);
      if (it == means_.end()) continue;
      std::printf("ratio %s/none = %.3f (cpu %.3f)\n", m, it->second.first / base->second.first,
                  it->second.second / base->second.second);
    }
  }

 private:
  std::map<std::string, std::pair<double, double>> means_;  // real, cpu
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
