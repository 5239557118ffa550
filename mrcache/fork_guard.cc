#include "mrcache/fork_guard.h"

#include <pthread.h>

#include <mutex>

#include "mrcache/memory_events.h"

namespace mrcache {
namespace fork_guard_internal {
std::atomic<uint64_t> g_fork_generation{0};
}  // namespace fork_guard_internal

namespace {

void OnForkChild() {
  fork_guard_internal::g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  NotifyListenersOfFork();  // caches drop their parent's registrations
}

std::once_flag g_once;

// Runs at load time so that a fork before the first cache exists is counted too.
const bool g_installed_at_load = [] {
  EnsureForkGuardInstalled();
  return true;
}();

}  // namespace

void EnsureForkGuardInstalled() {
  std::call_once(g_once, [] { pthread_atfork(nullptr, nullptr, &OnForkChild); });
}

}  // namespace mrcache
