// fork_children.h: forking children that must neither hang nor fail, and
// telling how they ended. Each child runs under alarm(10), so a deadlock in
// a child ends as SIGALRM instead of a hung test.
#ifndef TESTS_SOFTVERBS_FORK_CHILDREN_H_
#define TESTS_SOFTVERBS_FORK_CHILDREN_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fork_children {

// Forks; the child runs `child` (returning an exit status) under alarm(10)
// and exits with its result. Returns the child's wait status, -1 if fork or
// waitpid failed.
template <typename Fn>
int RunChild(Fn child) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    _exit(child());
  }
  int status = -1;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

// How a batch of children ended: killed by the alarm (a deadlock), or any
// other end but exit status 0.
struct Outcomes {
  int deadlocked = 0;
  int failed = 0;
};

// Runs `n` children one after another with RunChild and counts their ends.
template <typename Fn>
Outcomes RunChildren(int n, Fn child) {
  Outcomes out;
  for (int i = 0; i < n; ++i) {
    const int status = RunChild(child);
    if (status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++out.deadlocked;
    } else if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++out.failed;
    }
  }
  return out;
}

}  // namespace fork_children

#endif  // TESTS_SOFTVERBS_FORK_CHILDREN_H_
