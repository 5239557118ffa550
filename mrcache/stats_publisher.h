// stats_publisher.h: publishes a process's caches in its live statistics
// page (stats_page.h) while they exist.
//
// The first cache created with stats_shm=on creates the page
// /dev/shm/mrcache-<uid>-<pid> (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600; a page
// left by a dead process that had this pid is replaced) and starts one
// thread, "mrcache-stats", with every signal blocked, which refreshes every
// published cache's slot from CacheImpl::stats() and ReadHistograms() (and a
// rails cache's rails from RailsRegistrar::stats()) when a reader asks (stats_page.h, Freshness)
// and sleeps otherwise: a process nobody watches pays for no refresh and no cache lock. The caches'
// gets never touch the page: the hit path is unchanged, and the slow paths only count into their
// own histograms. The last publication's end stops the thread and removes the page; so does normal
// exit (an atexit handler removes the file; the thread then writes into the still-mapped, unlinked
// page until the process ends).
//
// A cache is published best-effort: when the page cannot be created (no
// /dev/shm, no room) or all kStatsSlots slots are taken, the cache works
// unpublished (the first failure is logged; the header counts caches without
// a slot).
//
// fork(): the child inherits neither the thread nor the page. Its inherited
// publications end without touching the parent's page; a cache it creates
// publishes in a page of its own.
//
// Locking: one mutex (a leaf, except that the thread holds it while it calls
// CacheImpl::stats(), which takes the cache's lock): Publish and the end of a
// publication wait for a refresh in progress; nobody takes it with a cache's
// lock held.
#ifndef MRCACHE_STATS_PUBLISHER_H_
#define MRCACHE_STATS_PUBLISHER_H_

#include <cstddef>
#include <memory>
#include <string>

namespace mrcache {

class CacheImpl;
class RailsRegistrar;

// While it exists, `cache`'s slot is refreshed; its destructor frees the
// slot (and removes the page and stops the thread if it was the last).
class StatsPublication {
 public:
  // Publishes `cache` (which must outlive the result) labelled with `rail`
  // and `registrar`, with each rail of `rails` (its registrar, if a rails
  // cache; else null; outlives the result too). Null if it could not be
  // published (see above).
  static std::unique_ptr<StatsPublication> Publish(CacheImpl* cache, const RailsRegistrar* rails,
                                                   const std::string& rail,
                                                   const std::string& registrar, size_t max_bytes);
  ~StatsPublication();
  StatsPublication(const StatsPublication&) = delete;
  StatsPublication& operator=(const StatsPublication&) = delete;

 private:
  StatsPublication(int slot, uint64_t generation) : slot_(slot), generation_(generation) {}
  const int slot_;
  const uint64_t generation_;  // the page it was published in
};

}  // namespace mrcache

#endif  // MRCACHE_STATS_PUBLISHER_H_
