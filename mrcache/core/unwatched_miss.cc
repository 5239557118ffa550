// unwatched_miss.cc: a miss whose range a monitor could not watch.
//
// A monitor that watches by range (uffd) answers WatchResult::kUnwatchable
// for memory it cannot track (a private file mapping, memory another
// userfaultfd holds, the map-count limit): a release there may never be
// reported, so no registration of it is cached. The registration already
// made serves the get that asked, as a bypass deregistered at its put; the
// failure is counted in watch_failures (by cause) and the get in bypassed.
#include "mrcache/core/cache_impl.h"

namespace mrcache {

Region* CacheImpl::ServeUnwatched(const Attempt& attempt) {
  // Every Watch is matched by an Unwatch (monitor.h); a bypass is never
  // watched.
  monitor_->Unwatch(reinterpret_cast<void*>(attempt.start), attempt.length());
  return bypass_.Adopt(attempt.start, attempt.end, *attempt.reg, Bypass::Kind::kUnwatched);
}

}  // namespace mrcache
