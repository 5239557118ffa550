// workloads.h: the built-in workloads, each a deterministic function of its
// parameters that produces a Trace (so a built-in workload and a trace file
// take the same replay path).
//
//   pingpong  a few buffers (4 KiB..1 MiB), whole-buffer transfers, reused forever
//   ring      ring-allreduce: per tensor (1..8 MiB, not page multiples) and
//             step, send one chunk and receive into the next; chunk
//             boundaries fall inside pages, so neighbouring chunks overlap
//   churn     a live set of max_regions/2 buffers of mixed sizes (64 B..4 MiB);
//             each buffer gets 1..8 transfers, then is freed and replaced, so
//             the allocator reuses addresses and invalidation matters
//   zipf      4 x max_regions buffers (4..128 KiB), Zipf(0.99)-popular
//   kv        one 64 MiB pool holding 32 x max_regions values (256 B..64 KiB,
//             each at a fixed random 64-byte aligned offset), Zipf(0.99)-popular
//
// max_regions = 0 (an unlimited cache) sizes the workloads as for 1,024.
//
// Invariants: the same (name, params) always yields the same trace; `ops`
// is the number of transfers; every trace frees what it allocates.
#ifndef BENCH_WORKLOADS_H_
#define BENCH_WORKLOADS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/trace.h"

namespace mrbench {

struct WorkloadParams {
  uint64_t seed = 1;
  size_t ops = 20000;        // transfers
  size_t max_regions = 256;  // the cache limit the workload is sized against (0 = unlimited)
  size_t max_bytes = 0;      // informational for sizing (0 = unlimited)
};

// pingpong ring churn zipf kv, in that order.
const std::vector<std::string>& WorkloadNames();

// EINVAL for an unknown name (the message lists the known ones) or ops == 0.
absl::StatusOr<Trace> MakeWorkload(const std::string& name, const WorkloadParams& params);

}  // namespace mrbench

#endif  // BENCH_WORKLOADS_H_
