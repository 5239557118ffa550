#include "mrcache/stats_publisher.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "mrcache/core/cache_impl.h"
#include "mrcache/internal/log.h"
#include "mrcache/rails_stats.h"
#include "mrcache/registrars/rails_registrar.h"
#include "mrcache/stats_page.h"

namespace mrcache {
namespace {

struct Entry {
  CacheImpl* cache = nullptr;             // null: the slot is free
  const RailsRegistrar* rails = nullptr;  // of a rails cache, else null
  size_t max_bytes = 0;
};
static_assert(kStatsRails >= kMaxRails, "a slot describes every rail a cache can have");

// One refresh thread: its stop flag, set under Publisher::mu, and the
// header of its page, whose refresh_request it sleeps on (mapped until the
// thread is joined, or until the process ends after exit()).
struct RefreshThread {
  pthread_t id;
  bool stop = false;
  StatsPageHeader* header = nullptr;
};

// The process's publications. Leaked (interposers and exit handlers may
// publish or withdraw until the process ends); replaced in a fork child.
struct Publisher {
  std::mutex mu;
  // The page, while one exists (mapped kStatsPageBytes; `path` its name).
  void* base = nullptr;
  std::string path;
  pid_t owner = 0;          // the process that created the page
  uint64_t generation = 0;  // of the current page; 0 while none
  Entry entries[kStatsSlots];
  int live = 0;
  uint32_t next_cache_id = 1;
  RefreshThread* thread = nullptr;  // running while a page exists
  bool exiting = false;             // past exit(): publish nothing more
  bool warned = false;              // a publishing failure was logged
};

std::atomic<uint64_t> g_generations{0};
std::atomic<Publisher*> g_publisher{nullptr};

StatsPageHeader* HeaderOf(void* base) { return static_cast<StatsPageHeader*>(base); }
StatsSlot* SlotOf(void* base, int i) {
  return reinterpret_cast<StatsSlot*>(static_cast<char*>(base) + sizeof(StatsPageHeader)) + i;
}

uint64_t UnixNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// A fork child has neither the parent's thread nor a right to its page: it
// starts with an empty publisher (the inherited one, whose mutex another
// thread may have held, is abandoned, its mapping dropped).
void OnForkChild() {
  Publisher* inherited = g_publisher.load(std::memory_order_relaxed);
  if (inherited != nullptr && inherited->base != nullptr) munmap(inherited->base, kStatsPageBytes);
  g_generations.fetch_add(1, std::memory_order_relaxed);  // inherited publications end quietly
  g_publisher.store(new Publisher, std::memory_order_relaxed);
}

void OnExit();

// Wakes `thread` (it sleeps on its page's refresh_request) to see its stop
// flag, which the caller set under p.mu.
void WakeToStop(RefreshThread* thread) {
  __atomic_add_fetch(&thread->header->refresh_request, 1, __ATOMIC_ACQ_REL);
  WakeStatsWord(&thread->header->refresh_request);
}

Publisher& P() {
  static Publisher* const first = [] {
    auto* p = new Publisher;
    g_publisher.store(p, std::memory_order_relaxed);
    pthread_atfork(nullptr, nullptr, &OnForkChild);
    std::atexit(&OnExit);
    return p;
  }();
  (void)first;
  return *g_publisher.load(std::memory_order_relaxed);
}

// True if the page was made by another process: this one is a child that
// the fork handler did not see (a raw clone), which must leave it alone.
bool InheritedLocked(const Publisher& p) { return p.base != nullptr && p.owner != getpid(); }

void OnExit() {
  Publisher& p = P();
  std::lock_guard<std::mutex> lock(p.mu);
  p.exiting = true;
  if (InheritedLocked(p)) return;
  if (p.base != nullptr) unlink(p.path.c_str());
  p.generation = 0;
  g_generations.fetch_add(1, std::memory_order_relaxed);  // later withdrawals change nothing
  if (p.thread != nullptr) {
    p.thread->stop = true;
    WakeToStop(p.thread);
  }
}

void WarnOnce(Publisher& p, const std::string& why) {
  if (p.warned) return;
  p.warned = true;
  Log(LogLevel::kWarning,
      absl::StrCat("stats_shm: caches are not published (", why, "); they work unpublished"));
}

// Runs `write` on slot `i` of the page as a seqlock writer.
template <typename Write>
void WriteSlot(void* base, int i, Write write) {
  StatsSlot* slot = SlotOf(base, i);
  const uint64_t seq = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&slot->seq, seq + 1, __ATOMIC_RELAXED);
  std::atomic_thread_fence(std::memory_order_release);
  write(slot);
  __atomic_store_n(&slot->seq, seq + 2, __ATOMIC_RELEASE);
}

// Copies `name` into `field` of `size` bytes, cut to leave a NUL.
void WriteName(char* field, size_t size, const std::string& name) {
  std::memset(field, 0, size);
  std::memcpy(field, name.data(), std::min(name.size(), size - 1));
}

// A newly published cache's labels and rail names; its figures zero.
void WriteLabels(StatsSlot* slot, uint32_t cache_id, const std::string& rail,
                 const std::string& registrar, const RailsRegistrar* rails) {
  slot->live = 1;
  slot->cache_id = cache_id;
  WriteName(slot->rail, sizeof slot->rail, rail);
  WriteName(slot->registrar, sizeof slot->registrar, registrar);
  std::memset(slot->rails, 0, sizeof slot->rails);
  slot->rail_count = rails != nullptr ? static_cast<uint32_t>(rails->rail_count()) : 0;
  for (uint32_t r = 0; r < slot->rail_count; ++r) {
    WriteName(slot->rails[r].name, sizeof slot->rails[r].name, rails->rail_name(r));
  }
}

// The figures of entry `e`: `s` and `h` read from its cache, and its rails'
// counters (atomic loads, no lock: cheap inside the seqlock's write).
void WriteFigures(StatsSlot* slot, const Entry& e, const CacheStats& s,
                  const CacheHistogramCounts& h) {
  uint64_t* c = slot->counters;
  c[kStatHits] = s.hits;
  c[kStatMisses] = s.misses;
  c[kStatRegistrations] = s.registrations;
  c[kStatDeregistrations] = s.deregistrations;
  c[kStatEvictions] = s.evictions;
  c[kStatInvalidations] = s.invalidations;
  c[kStatMerges] = s.merges;
  c[kStatRegions] = s.regions;
  c[kStatPinnedBytes] = s.pinned_bytes;
  c[kStatPeakPinnedBytes] = s.peak_pinned_bytes;
  c[kStatPinBudgetBytes] = s.pin_budget_bytes;
  c[kStatMaxBytes] = e.max_bytes;
  c[kStatRegistrarNs] = s.registrar_ns;
  c[kStatRegistrarFailures] = s.registrar_failures;
  c[kStatBypassed] = s.bypassed;
  c[kStatRemotePrivate] = s.remote_private;
  c[kStatWatchFailures] = s.watch_failures;
  c[kStatDeregQueueDepth] = s.dereg_queue_depth;
  c[kStatDeregWaitNs] = s.dereg_wait_ns;
  c[kStatBackgroundDeregNs] = s.background_dereg_ns;
  std::memcpy(slot->histograms[kHistRegionBytes], h.region_bytes, sizeof h.region_bytes);
  std::memcpy(slot->histograms[kHistMissNs], h.miss_ns, sizeof h.miss_ns);
  std::memcpy(slot->histograms[kHistRegisterNs], h.register_ns, sizeof h.register_ns);
  std::memcpy(slot->histograms[kHistDeregisterNs], h.deregister_ns, sizeof h.deregister_ns);
  std::memcpy(slot->histograms[kHistGetBytes], h.get_bytes, sizeof h.get_bytes);
  static_assert(sizeof slot->histogram_sums == sizeof h.sums, "one sum per histogram");
  std::memcpy(slot->histogram_sums, h.sums, sizeof h.sums);
  for (uint32_t r = 0; r < slot->rail_count; ++r) {
    const RailStats rail = e.rails->stats(static_cast<int>(r));
    uint64_t* rc = slot->rails[r].counters;
    rc[kRailRegistrations] = rail.registrations;
    rc[kRailDeregistrations] = rail.deregistrations;
    rc[kRailRegions] = rail.regions;
    rc[kRailRegisteredBytes] = rail.registered_bytes;
    rc[kRailRegistrarNs] = rail.registrar_ns;
  }
  slot->updated_unix_ns = UnixNs();
}

// A freed slot: nothing of its last cache stays readable.
void ClearSlot(StatsSlot* slot) {
  slot->live = 0;
  std::memset(slot->counters, 0, sizeof slot->counters);
  std::memset(slot->histograms, 0, sizeof slot->histograms);
  std::memset(slot->histogram_sums, 0, sizeof slot->histogram_sums);
  slot->rail_count = 0;
  std::memset(slot->rails, 0, sizeof slot->rails);
}

// Refreshes slot `i` from its cache. Requires p.mu. The cache's figures are
// read before the slot is marked as being written: a cache lock held long
// does not keep readers from a consistent copy.
void RefreshLocked(Publisher& p, int i) {
  const Entry& e = p.entries[i];
  const CacheStats s =
      e.rails == nullptr ? e.cache->stats() : CountedOnEachRail(e.cache->stats(), *e.rails);
  CacheHistogramCounts h;
  e.cache->ReadHistograms(&h);
  WriteSlot(p.base, i, [&](StatsSlot* slot) { WriteFigures(slot, e, s, h); });
}

// Refreshes every slot each time a reader asks (stats_page.h, Freshness),
// and sleeps in between: no timer, no cache lock while nobody reads.
void* RefreshMain(void* arg) {
  auto* self = static_cast<RefreshThread*>(arg);
  Publisher& p = P();  // a fork child never runs this thread
  uint32_t* request = &self->header->refresh_request;
  for (;;) {
    const uint32_t asked = __atomic_load_n(request, __ATOMIC_ACQUIRE);
    {
      std::lock_guard<std::mutex> lock(p.mu);
      if (self->stop) break;
      for (int i = 0; i < static_cast<int>(kStatsSlots); ++i) {
        if (p.entries[i].cache != nullptr) RefreshLocked(p, i);
      }
    }
    __atomic_store_n(&self->header->refresh_done, asked, __ATOMIC_RELEASE);
    WakeStatsWord(&self->header->refresh_done);
    // Returns at once if a request came meanwhile.
    while (__atomic_load_n(request, __ATOMIC_ACQUIRE) == asked) WaitStatsWord(request, asked, 0);
  }
  return nullptr;
}

// Creates and maps this process's page. Requires p.mu.
bool CreatePageLocked(Publisher& p) {
  const pid_t pid = getpid();
  const uid_t uid = getuid();
  const std::string path = StatsPagePath(uid, pid);
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST || attempt > 0) break;
    // This process has no page: one there was left by a dead process that
    // had this pid. Replaced only if it is a regular file of ours.
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
        unlink(path.c_str()) != 0) {
      WarnOnce(p, absl::StrCat(path, " exists and is not a page this user may replace"));
      return false;
    }
  }
  if (fd < 0) {
    WarnOnce(p, absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
    return false;
  }
  void* base = MAP_FAILED;
  if (fchmod(fd, 0600) == 0 && ftruncate(fd, static_cast<off_t>(kStatsPageBytes)) == 0) {
    base = mmap(nullptr, kStatsPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    unlink(path.c_str());
    WarnOnce(p, absl::StrCat("cannot size or map ", path, ": ", std::strerror(err)));
    return false;
  }
  StatsPageHeader* h = HeaderOf(base);
  h->version = kStatsPageVersion;
  h->header_bytes = sizeof(StatsPageHeader);
  h->slot_bytes = sizeof(StatsSlot);
  h->slot_count = kStatsSlots;
  h->pid = static_cast<uint32_t>(pid);
  h->uid = static_cast<uint32_t>(uid);
  h->start_ticks = ProcessStartTicks(pid);
  h->interval_ns = 0;  // refreshed on request
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kStatsPageMagic, sizeof h->magic);  // last: the page is complete
  p.base = base;
  p.path = path;
  p.owner = pid;
  p.generation = g_generations.fetch_add(1, std::memory_order_relaxed) + 1;
  return true;
}

// Starts the refresh thread with every signal blocked. Requires p.mu.
bool StartThreadLocked(Publisher& p) {
  auto* thread = new RefreshThread;
  thread->header = HeaderOf(p.base);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = pthread_create(&thread->id, nullptr, &RefreshMain, thread);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    delete thread;
    WarnOnce(p, absl::StrCat("cannot start the refresh thread: ", std::strerror(rc)));
    return false;
  }
  pthread_setname_np(thread->id, "mrcache-stats");
  p.thread = thread;
  return true;
}

// Removes the page and detaches the thread for the caller to join and the
// mapping for it to unmap (after the join). Requires p.mu.
void RetirePageLocked(Publisher& p, RefreshThread** thread, void** base) {
  unlink(p.path.c_str());
  *base = p.base;
  *thread = p.thread;
  if (p.thread != nullptr) {
    p.thread->stop = true;
    WakeToStop(p.thread);
  }
  p.thread = nullptr;
  p.base = nullptr;
  p.generation = 0;
}

}  // namespace

std::unique_ptr<StatsPublication> StatsPublication::Publish(CacheImpl* cache,
                                                            const RailsRegistrar* rails,
                                                            const std::string& rail,
                                                            const std::string& registrar,
                                                            size_t max_bytes) {
  Publisher& p = P();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.exiting) return nullptr;
  if (InheritedLocked(p)) {
    // Abandoned, not unmapped: the address space may be the parent's too.
    p.base = nullptr;
    p.generation = 0;
    p.thread = nullptr;  // the parent's
    p.live = 0;
    for (Entry& e : p.entries) e = Entry{};
  }
  if (p.base == nullptr && !CreatePageLocked(p)) return nullptr;
  int slot = -1;
  for (int i = 0; i < static_cast<int>(kStatsSlots) && slot < 0; ++i) {
    if (p.entries[i].cache == nullptr) slot = i;
  }
  if (slot < 0) {
    ++HeaderOf(p.base)->unpublished;
    WarnOnce(p, absl::StrCat("all ", kStatsSlots, " slots of the page are taken"));
    return nullptr;
  }
  if (p.thread == nullptr && !StartThreadLocked(p)) {
    if (p.live == 0) {
      RefreshThread* none = nullptr;
      void* base = nullptr;
      RetirePageLocked(p, &none, &base);
      munmap(base, kStatsPageBytes);
    }
    return nullptr;
  }
  p.entries[slot] = Entry{cache, rails, max_bytes};
  ++p.live;
  const uint32_t cache_id = p.next_cache_id++;
  WriteSlot(p.base, slot, [&](StatsSlot* s) { WriteLabels(s, cache_id, rail, registrar, rails); });
  RefreshLocked(p, slot);  // visible now, not only at the next refresh
  return std::unique_ptr<StatsPublication>(new StatsPublication(slot, p.generation));
}

StatsPublication::~StatsPublication() {
  Publisher& p = P();
  RefreshThread* thread = nullptr;
  void* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    // Published in a page since removed (exit) or inherited from a parent.
    if (generation_ != p.generation || p.base == nullptr || InheritedLocked(p)) return;
    p.entries[slot_] = Entry{};
    WriteSlot(p.base, slot_, &ClearSlot);
    if (--p.live == 0) RetirePageLocked(p, &thread, &base);
  }
  if (thread != nullptr) {
    pthread_join(thread->id, nullptr);
    delete thread;
  }
  if (base != nullptr) munmap(base, kStatsPageBytes);
}

}  // namespace mrcache
