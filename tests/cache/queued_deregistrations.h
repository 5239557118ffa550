// queued_deregistrations.h: waiting for a cache's background deregistrations
// (async_dereg) before a test observes its registrar.
#ifndef MRCACHE_TESTS_CACHE_QUEUED_DEREGISTRATIONS_H_
#define MRCACHE_TESTS_CACHE_QUEUED_DEREGISTRATIONS_H_

#include <chrono>
#include <thread>

#include "mrcache/cache.h"

namespace mrcache {
namespace testing {

// Polls stats().dereg_queue_depth until it is 0: every registration that
// left the cache before the call is then deregistered (the depth counts a
// region until its deregistration, unwatch and retire callback are done).
// False if that takes longer than `limit`.
inline bool WaitForQueuedDeregistrations(
    const Cache& cache, std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (cache.stats().dereg_queue_depth != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

}  // namespace testing
}  // namespace mrcache

#endif  // MRCACHE_TESTS_CACHE_QUEUED_DEREGISTRATIONS_H_
