// child_stderr.h: runs code in a forked child and returns what it wrote to
// stderr, for tests of messages that are printed once per process.
#ifndef MRCACHE_TESTS_CACHE_CHILD_STDERR_H_
#define MRCACHE_TESTS_CACHE_CHILD_STDERR_H_

#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace mrcache_test {

struct ChildResult {
  int exit_status = -1;  // the child's exit status; -1 if it did not exit
  std::string stderr_text;
};

// Forks; the child runs body() with stderr on a pipe (and a 30 s alarm), then
// _exit(0) unless body exited first.
template <typename F>
ChildResult RunInChild(F body) {
  ChildResult result;
  int fds[2];
  if (pipe(fds) != 0) return result;
  const pid_t pid = fork();
  if (pid < 0) return result;
  if (pid == 0) {
    alarm(30);
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0)
    result.stderr_text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
    result.exit_status = WEXITSTATUS(status);
  return result;
}

}  // namespace mrcache_test

#endif  // MRCACHE_TESTS_CACHE_CHILD_STDERR_H_
