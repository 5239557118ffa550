// configs.h: the configurations mrbench compares.
//
//   none             register + deregister around every transfer (NoneDriver)
//   mrcache          mrcache::Cache with its defaults (MrcacheDriver)
//   mrcache-nomerge  the same with max_merge_bytes = 0
//   ucx              UCX 1.13 ucs_rcache, in a child process (ucx_peer.h);
//                    under a pin budget, that budget is its max_size (UCX
//                    has no budget of its own and fails at the limit)
//   belady-nomerge   Belady's MIN for a cache that never merges (belady.h):
//                    the fewest registrations any non-merging cache with the
//                    same limits could make, so a merging cache can beat it.
//                    Computed from the trace, not run; within max_regions,
//                    max_bytes and, under --memlock, the same pin budget the
//                    caches get (pin_budget_bytes)
//
// Every run configuration gets a fresh registrar of the same kind, wrapped in
// a CountingRegistrar, and the same limits (max_regions, max_bytes). RunConfig
// never fails as a whole: a configuration that cannot run returns a Row whose
// `error` says why, so the others are still reported.
#ifndef BENCH_CONFIGS_H_
#define BENCH_CONFIGS_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "bench/report.h"
#include "bench/trace.h"
#include "mrcache/config.h"

namespace mrbench {

struct BenchOptions {
  mrcache::Config base;  // registrar name and parameters (limits are set per run)
  size_t max_regions = 256;
  size_t max_bytes = 0;
  // The pinned-memory budget the caches work within (RLIMIT_MEMLOCK applies,
  // e.g. mrbench --memlock), so that `belady-nomerge` and `ucx` respect it
  // too; 0 = none.
  size_t pin_budget = 0;
  bool verify = false;
};

// none mrcache mrcache-nomerge ucx belady-nomerge.
const std::vector<std::string>& ConfigNames();

// The name ConfigNames() uses for `name`: `optimal`, its name before
// belady-nomerge, is still accepted.
std::string CanonicalConfigName(absl::string_view name);

// A recorded trace (trace.h) replays with the recording's max_merge_bytes,
// bridge_bytes, alignment and remote_keys (what decides which requests share a
// registration); mrbench takes its max_regions and max_bytes too unless
// --max-regions/--max-bytes are given. The registrar, monitor and ODP mode
// stay mrbench's: the replay runs without the live device and process.
void ApplyRecordedConfig(const mrcache::Config& recorded, mrcache::Config* config);

Row RunConfig(const std::string& config, const Trace& trace, const BenchOptions& options);

// RunConfig(row->config, trace, options) in a forked child (child_run.h),
// its results copied into *row, whose config, workload and max_regions the
// caller set. Allocates nothing in the caller when the run succeeds, nor when
// the child reports an error that fits a `row->error` reserved to
// kRowErrorCapacity: a caller that allocates nothing between two calls gives
// both configurations the same heap layout. (A child that dies or cannot be
// started costs an allocation in the caller.) The caller must be
// single-threaded.
constexpr size_t kRowErrorCapacity = 1024;
void RunConfigInChild(const Trace& trace, const BenchOptions& options, Row* row);

}  // namespace mrbench

#endif  // BENCH_CONFIGS_H_
