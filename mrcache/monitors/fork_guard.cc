#include "mrcache/monitors/fork_guard.h"

#include <pthread.h>

#include <mutex>

#include "mrcache/monitors/memory_events.h"

namespace mrcache {
namespace fork_guard_internal {
std::atomic<uint64_t> g_fork_generation{0};
}  // namespace fork_guard_internal

namespace {

std::atomic<const ForkHandlers*> g_monitor_handlers{nullptr};
// The handlers `prepare` used, so that parent and child release exactly what
// was taken even if SetMonitorForkHandlers runs meanwhile (it cannot run
// between prepare and parent/child on the forking thread).
const ForkHandlers* g_prepared = nullptr;

// Lock order: fork_guard.h.
void OnForkPrepare() {
  g_prepared = g_monitor_handlers.load(std::memory_order_acquire);
  if (g_prepared != nullptr) g_prepared->prepare();
  LockListenersForFork();
}

void OnForkParent() {
  UnlockListenersAfterFork(/*in_child=*/false);
  if (g_prepared != nullptr) g_prepared->parent();
}

void OnForkChild() {
  fork_guard_internal::g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  UnlockListenersAfterFork(/*in_child=*/true);  // caches drop their parent's registrations
  if (g_prepared != nullptr) g_prepared->child();
}

std::once_flag g_once;

// Runs at load time so that a fork before the first cache exists is counted too.
const bool g_installed_at_load = [] {
  EnsureForkGuardInstalled();
  return true;
}();

}  // namespace

void EnsureForkGuardInstalled() {
  std::call_once(g_once, [] { pthread_atfork(&OnForkPrepare, &OnForkParent, &OnForkChild); });
}

void SetMonitorForkHandlers(const ForkHandlers* handlers) {
  g_monitor_handlers.store(handlers, std::memory_order_release);
}

}  // namespace mrcache
