// ucx_peer.h: runs the `ucx` configuration in a child process.
//
// UCX installs process-wide memory hooks when loaded with its defaults, and
// its constructors read the environment once. The peer therefore forks, and
// only the child sets UCX_MEM_MMAP_HOOK_MODE=none, loads libucs (ucs_api.h),
// builds its own registrar, replays the trace through ucs_rcache and sends
// the ReplayResult back through a pipe. The parent never loads UCX. A
// recording made under remote_keys=private replays under that rule
// (private_remote_keys.h). The
// caller must be single-threaded when it calls RunUcxPeer (fork).
#ifndef BENCH_UCX_PEER_H_
#define BENCH_UCX_PEER_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "bench/replay.h"
#include "bench/trace.h"
#include "mrcache/registrar.h"

namespace mrbench {

struct UcxPeerSpec {
  // Builds the registrar, in the child.
  std::function<absl::StatusOr<std::unique_ptr<mrcache::Registrar>>()> make_registrar;
  size_t max_regions = 0;
  size_t max_bytes = 0;
  ReplayOptions options;
};

// The union of the access flags of the trace's transfers (or registrations) (what a UCX memory
// domain would register every region with).
int UnionAccess(const Trace& trace);

// The child's ReplayResult, or its error (errno and message preserved), or an
// error saying how the child died.
absl::StatusOr<ReplayResult> RunUcxPeer(const Trace& trace, const UcxPeerSpec& spec);

// The same, in this process (libucs is loaded here, hooks off): for tests
// and for callers that are already in a dedicated process.
absl::StatusOr<ReplayResult> RunUcxInProcess(const Trace& trace, const UcxPeerSpec& spec);

}  // namespace mrbench

#endif  // BENCH_UCX_PEER_H_
