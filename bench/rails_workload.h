// rails_workload.h: mrbench --rails N, one cache over N rails (PDs) with
// lazy per-rail registration against `eager`, the same cache registering
// every region on every rail as a registrar callback over all NICs would.
//
// The workload (deterministic for a seed): 16 buffers in flight, each of
// 256 KiB..2 MiB, freshly mapped and written; each is sent to one
// destination (and, one time in four, to a second one) in 1..4 chunks, each
// transfer on the rail of its destination (destination % N), then unmapped
// and replaced. Both configurations replay the same transfers on fresh
// registrars, alternately, `repeats` times; the report gives the medians of
// registrations (every rail's), registrar seconds, total seconds (in the
// cache's calls: registration, deregistration and the cache's own work) and
// wall seconds (the workload's own mmap, fill and munmap included), the
// process's CPU seconds over the replay (every thread's, so work moved to
// async_dereg's background thread still counts), and lazy's ratio to eager's; then, timed after
// them in each run, the rails' registrars alone on the same buffers (rails_registrar_only.h).
#ifndef BENCH_RAILS_WORKLOAD_H_
#define BENCH_RAILS_WORKLOAD_H_

#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "mrcache/config.h"

namespace mrbench {

struct RailsRunOptions {
  mrcache::Config base;  // registrar and limits; each rail gets its own registrar
  int rails = 4;         // 1..64
  uint64_t seed = 1;
  uint64_t transfers = 20000;
  int repeats = 5;
};

// Runs the rails workload and prints its table to `out`.
absl::Status RunRailsWorkload(const RailsRunOptions& options, FILE* out);

}  // namespace mrbench

#endif  // BENCH_RAILS_WORKLOAD_H_
