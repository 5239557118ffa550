// child_run.h: runs a function in a forked child and copies back the bytes
// it leaves in a buffer.
//
// mrbench runs every configuration this way (configs.h, RunConfigInChild):
// each child starts from the same copy of the parent -- the same heap, the
// same address layout -- so that malloc places a workload's buffers at the
// same addresses for every configuration. Where buffers share pages decides
// what a cache can merge or reuse, and configurations replayed one after
// another in one process would each see the heap the previous ones left
// (bench/RESULTS.md, "One heap layout for every configuration"). Nothing a
// configuration installs (memory hooks, a monitor, an io_uring) outlives it
// either.
//
// RunInChild allocates nothing in the caller on success, so that a caller
// which allocates nothing between two calls forks two identical children.
// The caller must be single-threaded (fork). A child that forks again (the
// UCX peer inside the `ucx` configuration) passes the pipe on: if the child
// dies first, the caller reads until the grandchild exits too.
#ifndef BENCH_CHILD_RUN_H_
#define BENCH_CHILD_RUN_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace mrbench {

// Forks; the child calls fill(context, buffer) on a copy of `out` (`size`
// bytes) and exits, and the bytes it left there are copied into `out`.
// Returns OK, or an error naming `what` if the child could not be started,
// was killed, or exited without sending them all (`out` may then hold part
// of them).
absl::Status RunInChild(absl::string_view what, void (*fill)(void* context, void* buffer),
                        void* context, void* out, size_t size);

}  // namespace mrbench

#endif  // BENCH_CHILD_RUN_H_
