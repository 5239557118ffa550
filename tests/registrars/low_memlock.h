// low_memlock.h: run a test body in a child process that is subject to
// RLIMIT_MEMLOCK.
//
// Root has CAP_IPC_LOCK, which exempts it from RLIMIT_MEMLOCK. The child drops
// that capability from its effective set, lowers RLIMIT_MEMLOCK to `limit`
// bytes, runs `body` and sends its result (a trivially copyable struct) back
// through a pipe. The parent is untouched.
//
// An unprivileged io_uring charges its pinned pages to the user, not to the
// process, so two such children of one user running at once (tests run in
// parallel) would share one `limit`. The child therefore takes the user's
// memlock turn first (an flock on /tmp/softverbs-memlock-turn.<uid>, the
// file the unprivileged UCX tests take too: tests/softverbs/foreign_programs.sh),
// waiting at most four minutes; it holds the turn until it exits.
#ifndef TESTS_REGISTRARS_LOW_MEMLOCK_H_
#define TESTS_REGISTRARS_LOW_MEMLOCK_H_

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <type_traits>

namespace mrcache_test {

inline bool DropIpcLockFromEffectiveSet() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  return syscall(SYS_capset, &header, data) == 0;
}

// Takes this user's memlock turn (see above) for the rest of the process's
// life; false (errno set) if the file cannot be opened or the turn is not
// free within four minutes.
inline bool TakeMemlockTurn() {
  char path[64];
  snprintf(path, sizeof path, "/tmp/softverbs-memlock-turn.%u", static_cast<unsigned>(getuid()));
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  for (int waited_ms = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited_ms += 10) {
    if (errno != EWOULDBLOCK || waited_ms >= 240000) return false;
    usleep(10000);
  }
  return true;  // fd stays open: the lock lasts until exit
}

// What came back from the child. setup_errno != 0: the child could not lower
// its limits; child_ok == false: it died or sent nothing.
template <typename Outcome>
struct ChildResult {
  bool child_ok = false;
  int setup_errno = 0;
  Outcome outcome{};
};

template <typename Outcome, typename Body>
ChildResult<Outcome> RunWithLowMemlock(size_t limit, Body body) {
  static_assert(std::is_trivially_copyable<Outcome>::value, "sent through a pipe");
  ChildResult<Outcome> result;
  int fds[2];
  if (pipe(fds) != 0) return result;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return result;
  }
  if (pid == 0) {
    close(fds[0]);
    ChildResult<Outcome> mine;
    mine.child_ok = true;
    rlimit low{limit, limit};
    if (!TakeMemlockTurn() || !DropIpcLockFromEffectiveSet() ||
        setrlimit(RLIMIT_MEMLOCK, &low) != 0) {
      mine.setup_errno = errno;
    } else {
      mine.outcome = body();
    }
    ssize_t n = write(fds[1], &mine, sizeof mine);
    _exit(n == static_cast<ssize_t>(sizeof mine) ? 0 : 1);
  }
  close(fds[1]);
  ssize_t n = read(fds[0], &result, sizeof result);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != static_cast<ssize_t>(sizeof result) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    result.child_ok = false;
  }
  return result;
}

}  // namespace mrcache_test

#endif  // TESTS_REGISTRARS_LOW_MEMLOCK_H_
