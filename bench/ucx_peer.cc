#include "bench/ucx_peer.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/counting_registrar.h"
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

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

size_t ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

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
  return Replay(trace, driver, *counters, spec.options);
}

absl::StatusOr<ReplayResult> RunUcxPeer(const Trace& trace, const UcxPeerSpec& spec) {
  int fds[2];
  if (pipe(fds) != 0) return ErrnoStatus(errno, "ucx peer: pipe");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]), close(fds[1]);
    return ErrnoStatus(err, "ucx peer: fork");
  }
  if (pid == 0) {
    close(fds[0]);
    PeerMessage msg;
    absl::StatusOr<ReplayResult> result = RunUcxInProcess(trace, spec);
    if (result.ok()) {
      msg.result = *result;
    } else {
      msg.err = mrcache::StatusToErrno(result.status());
      std::snprintf(msg.message, sizeof msg.message, "%s",
                    std::string(result.status().message()).c_str());
    }
    _exit(WriteAll(fds[1], &msg, sizeof msg) ? 0 : 1);
  }
  close(fds[1]);
  PeerMessage msg;
  const size_t got = ReadAll(fds[0], &msg, sizeof msg);
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    return ErrnoStatus(EIO, absl::StrCat("ucx peer killed by signal ", WTERMSIG(wstatus), " (",
                                         strsignal(WTERMSIG(wstatus)), ")"));
  }
  if (got != sizeof msg) {
    return ErrnoStatus(EIO, absl::StrCat("ucx peer exited with status ", WEXITSTATUS(wstatus),
                                         " without a result"));
  }
  if (msg.err != 0) {
    // The child's message already ends with the errno's text, which ErrnoStatus appends again.
    absl::string_view text(msg.message);
    absl::ConsumeSuffix(&text, absl::StrCat(" (", strerror(msg.err), ")"));
    return ErrnoStatus(msg.err, absl::StrCat("ucx peer: ", text));
  }
  return msg.result;
}

}  // namespace mrbench
