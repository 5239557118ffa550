#include "bench/ucx_peer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/child_run.h"
#include "bench/counting_registrar.h"
#include "bench/private_remote_keys.h"
#include "bench/ucx_rcache.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

// What the child writes into the pipe (same binary on both ends).
struct PeerMessage {
  int err = 0;  // 0: result is valid
  ReplayResult result;
  char message[1024] = {};
};
static_assert(std::is_trivially_copyable<PeerMessage>::value, "sent through a pipe as bytes");

}  // namespace

int UnionAccess(const Trace& trace) {
  int access = 0;
  for (const TraceOp& op : trace.ops) {
    if (op.kind == TraceOp::kXfer || op.kind == TraceOp::kReg) access |= op.access;
  }
  return access == 0 ? kDefaultAccess : access;
}

absl::StatusOr<ReplayResult> RunUcxInProcess(const Trace& trace, const UcxPeerSpec& spec) {
  absl::StatusOr<const UcsApi*> api = LoadUcsWithoutHooks();
  if (!api.ok()) return api.status();
  absl::StatusOr<std::unique_ptr<mrcache::Registrar>> inner = spec.make_registrar();
  if (!inner.ok()) return inner.status();
  auto counters = std::make_shared<RegistrarCounters>();
  CountingRegistrar registrar(std::move(*inner), counters);
  absl::StatusOr<std::unique_ptr<UcxRcache>> cache =
      UcxRcache::Create(**api, registrar, spec.max_regions, spec.max_bytes, UnionAccess(trace));
  if (!cache.ok()) return cache.status();
  UcxDriver driver(std::move(*cache));
  if (!RecordedWithPrivateRemoteKeys(trace)) return Replay(trace, driver, *counters, spec.options);
  PrivateRemoteKeysDriver private_remote(driver, registrar);
  return Replay(trace, private_remote, *counters, spec.options);
}

absl::StatusOr<ReplayResult> RunUcxPeer(const Trace& trace, const UcxPeerSpec& spec) {
  struct Job {
    const Trace* trace;
    const UcxPeerSpec* spec;
  } job{&trace, &spec};
  PeerMessage msg;
  absl::Status ran = RunInChild(
      "ucx peer",
      [](void* context, void* buffer) {
        const Job& j = *static_cast<Job*>(context);
        PeerMessage& m = *static_cast<PeerMessage*>(buffer);
        absl::StatusOr<ReplayResult> result = RunUcxInProcess(*j.trace, *j.spec);
        if (result.ok()) {
          m.result = *result;
        } else {
          m.err = mrcache::StatusToErrno(result.status());
          std::snprintf(m.message, sizeof m.message, "%s",
                        std::string(result.status().message()).c_str());
        }
      },
      &job, &msg, sizeof msg);
  if (!ran.ok()) return ran;
  if (msg.err != 0) {
    // The child's message already ends with the errno's text, which ErrnoStatus appends again.
    absl::string_view text(msg.message);
    absl::ConsumeSuffix(&text, absl::StrCat(" (", strerror(msg.err), ")"));
    return ErrnoStatus(msg.err, absl::StrCat("ucx peer: ", text));
  }
  return msg.result;
}

}  // namespace mrbench
