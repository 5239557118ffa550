#include "bench/child_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

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

absl::Status RunInChild(absl::string_view what, void (*fill)(void* context, void* buffer),
                        void* context, void* out, size_t size) {
  int fds[2];
  if (pipe(fds) != 0) return ErrnoStatus(errno, absl::StrCat(what, ": pipe"));
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]), close(fds[1]);
    return ErrnoStatus(err, absl::StrCat(what, ": fork"));
  }
  if (pid == 0) {
    close(fds[0]);
    fill(context, out);  // the child's copy of `out`
    std::fflush(nullptr);
    _exit(WriteAll(fds[1], out, size) ? 0 : 1);
  }
  close(fds[1]);
  const size_t got = ReadAll(fds[0], out, size);
  int wstatus = 0;
  close(fds[0]);
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    return ErrnoStatus(
        EIO, absl::StrCat(what, ": child process killed by signal ", WTERMSIG(wstatus), " (",
                          strsignal(WTERMSIG(wstatus)), ")"));
  }
  if (got != size) {
    return ErrnoStatus(EIO, absl::StrCat(what, ": child process exited with status ",
                                         WEXITSTATUS(wstatus), " without a result"));
  }
  return absl::OkStatus();
}

}  // namespace mrbench
