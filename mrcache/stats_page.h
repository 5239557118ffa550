// stats_page.h: the live statistics page of a process, its layout and its
// reader.
//
// A process whose caches run with stats_shm=on publishes their counters in
// one shared-memory file, /dev/shm/mrcache-<uid>-<pid> (StatsPagePath),
// created with O_EXCL|O_NOFOLLOW, mode 0600, and removed when its last cache
// is destroyed and at normal exit (stats_publisher.h writes it). It holds a
// header and kStatsSlots slots, one per live cache. A rails cache's slot
// also holds each rail's name and counters (rail_count of them); another
// cache's has none.
//
// Freshness: the publisher refreshes the slots when a reader asks, not on a
// timer (a process nobody watches pays nothing). ReadStatsPage adds one to
// the header's refresh_request and wakes the publisher (a futex on that
// word); the publisher, which sleeps on it, stores the request value it
// read in refresh_done once it has refreshed every slot after reading it,
// and wakes the readers waiting on refresh_done. A reader that sees
// refresh_done reach its request within kStatsRefreshWaitNs reads figures
// taken after it asked; otherwise (the process is stopped, or a cache's lock
// is held that long) it reads the last refresh's, and says so. Each slot
// carries the time it was last written.
//
// Consistency: a slot is a seqlock. The writer makes `seq` odd, writes the
// slot, then makes it even again; a reader that sees the same even `seq`
// before and after copying a slot has a consistent copy.
//
// A reader never trusts the page: ParseStatsPage checks every field it uses
// (magic, version, sizes, pid and uid against the file's name and owner,
// flags, NUL-terminated strings) and answers a clear error for anything
// else; ReadStatsPage opens the file itself without following links and
// refuses one that is not a regular file of the caller's own, mode 0600.
#ifndef MRCACHE_STATS_PAGE_H_
#define MRCACHE_STATS_PAGE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mrcache/core/log2_histogram.h"

namespace mrcache {

constexpr char kStatsPageMagic[8] = {'M', 'R', 'C', 'S', 'T', 'A', 'T', 'S'};
constexpr uint32_t kStatsPageVersion = 3;
constexpr uint32_t kStatsSlots = 256;
// How long a reader waits for the refresh it asked for.
constexpr uint64_t kStatsRefreshWaitNs = 500'000'000;
constexpr int kStatsBuckets = Log2Histogram::kBuckets;
// The most rails a slot describes: as many as a cache can have (kMaxRails,
// rails_registrar.h).
constexpr uint32_t kStatsRails = 64;

// The per-cache figures, in slot order. kind: counter (only grows) or gauge.
enum StatsCounter : int {
  kStatHits,
  kStatMisses,
  kStatRegistrations,
  kStatDeregistrations,
  kStatEvictions,
  kStatInvalidations,
  kStatMerges,
  kStatRegions,
  kStatPinnedBytes,
  kStatPeakPinnedBytes,
  kStatPinBudgetBytes,
  kStatMaxBytes,
  kStatRegistrarNs,
  kStatRegistrarFailures,
  kStatBypassed,
  kStatRemotePrivate,
  kStatWatchFailures,
  kStatDeregQueueDepth,
  kStatDeregWaitNs,
  kStatBackgroundDeregNs,
  kStatCounters
};
struct StatsCounterInfo {
  const char* name;        // the JSON key
  const char* prometheus;  // the Prometheus metric (base units: _total, _bytes, _seconds)
  bool gauge;
  bool nanoseconds;  // Prometheus shows it in seconds
  const char* help;
};
// Indexed by StatsCounter.
extern const StatsCounterInfo kStatsCounterInfo[kStatCounters];

// The figures of one rail of a rails cache (RailStats), in slot order.
enum StatsRailCounter : int {
  kRailRegistrations,
  kRailDeregistrations,
  kRailRegions,
  kRailRegisteredBytes,
  kRailRegistrarNs,
  kStatRailCounters
};
// Indexed by StatsRailCounter; the Prometheus names start with "rail_".
extern const StatsCounterInfo kStatsRailCounterInfo[kStatRailCounters];

enum StatsHistogram : int {
  kHistRegionBytes,
  kHistMissNs,
  kHistRegisterNs,
  kHistDeregisterNs,
  kHistGetBytes,
  kStatHistograms
};
struct StatsHistogramInfo {
  const char* name;        // the JSON key
  const char* prometheus;  // the Prometheus histogram (_bucket, _sum, _count)
  bool nanoseconds;        // Prometheus shows it (bounds and sum) in seconds
  const char* help;
};
extern const StatsHistogramInfo kStatsHistogramInfo[kStatHistograms];

struct StatsPageHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(StatsPageHeader)
  uint32_t slot_bytes;    // sizeof(StatsSlot)
  uint32_t slot_count;    // kStatsSlots
  uint32_t pid;
  uint32_t uid;
  uint64_t start_ticks;  // the process's start time (/proc/PID/stat field 22)
  uint64_t interval_ns;  // 0: the slots are refreshed on request, never on a timer
  uint32_t unpublished;  // caches that found no free slot
  uint32_t reserved;
  // Futex words (see Freshness above), counters that wrap: readers add one
  // to refresh_request; the publisher copies what it read of it to
  // refresh_done after the refresh that followed.
  uint32_t refresh_request;
  uint32_t refresh_done;
};

struct StatsRail {
  char name[32];  // the rail's device (verbs), else its registrar; NUL-terminated
  uint64_t counters[kStatRailCounters];
};

struct StatsSlot {
  uint64_t seq;        // seqlock: odd while being written
  uint32_t live;       // 1: a cache is published here; 0: free
  uint32_t cache_id;   // 1, 2, ... in the order the process created its caches
  char rail[32];       // the device it registers on (verbs), else its registrar; NUL-terminated
  char registrar[16];  // the registrar's name; NUL-terminated
  uint64_t updated_unix_ns;
  uint64_t counters[kStatCounters];
  uint64_t histograms[kStatHistograms][kStatsBuckets];
  uint64_t histogram_sums[kStatHistograms];  // the sum of each histogram's values
  uint32_t rail_count;                       // rails[0..rail_count-1]; 0: not a rails cache
  uint32_t reserved;
  StatsRail rails[kStatsRails];
};

constexpr size_t kStatsPageBytes = sizeof(StatsPageHeader) + kStatsSlots * sizeof(StatsSlot);

// "/dev/shm/mrcache-<uid>-<pid>".
std::string StatsPagePath(uid_t uid, pid_t pid);
// The pid in a page's file name (not a path) if it is "mrcache-<uid>-<pid>"
// for this `uid`, else -1.
pid_t PidOfStatsPageName(absl::string_view name, uid_t uid);
// Field 22 of /proc/<pid>/stat (the start time in clock ticks since boot),
// 0 if it cannot be read: with the pid, it names one process for good.
uint64_t ProcessStartTicks(pid_t pid);

struct RailSnapshot {
  std::string name;
  uint64_t counters[kStatRailCounters] = {};
};

struct CacheSnapshot {
  uint32_t cache_id = 0;
  // rail: of a rails cache, its rails' names joined with '+' (whole, where
  // the slot's own field would cut it).
  std::string rail, registrar;
  uint64_t updated_unix_ns = 0;
  uint64_t counters[kStatCounters] = {};
  uint64_t histograms[kStatHistograms][kStatsBuckets] = {};
  uint64_t histogram_sums[kStatHistograms] = {};
  std::vector<RailSnapshot> rails;  // empty unless a rails cache
};

struct ProcessSnapshot {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  uint64_t interval_ns = 0;  // 0: refreshed on request
  uint32_t unpublished = 0;
  // Whether the publisher refreshed every slot after this reading asked
  // (ReadStatsPage); false: it did not answer within kStatsRefreshWaitNs
  // (or was not asked), and each slot is as old as its updated_unix_ns.
  bool refreshed_on_request = false;
  std::vector<CacheSnapshot> caches;  // by slot
};

// Validates `bytes` as the page of process `pid` owned by `uid` and returns
// its live slots. EINVAL (with what is wrong) for a page of another size,
// magic, version, pid or uid, a torn slot (odd seq), a bad flag, a rail
// count above kStatsRails or an unterminated string. Never reads outside
// `bytes`.
absl::StatusOr<ProcessSnapshot> ParseStatsPage(absl::string_view bytes, pid_t pid, uid_t uid);

// Opens the page of `pid` of the calling user (StatsPagePath), asks its
// publisher for a refresh and waits for it (at most kStatsRefreshWaitNs;
// the answer's refreshed_on_request says whether it came), and reads it,
// retrying slots caught mid-write. ENOENT: the process publishes nothing;
// EACCES: not the caller's own regular file of mode 0600; EINVAL as
// ParseStatsPage says.
absl::StatusOr<ProcessSnapshot> ReadStatsPage(pid_t pid);
// The same for a page at `path` (tests, fuzzing), expected to be `pid`'s.
absl::StatusOr<ProcessSnapshot> ReadStatsPageAt(const std::string& path, pid_t pid);

// The page's futex words, shared between processes (FUTEX_WAIT/WAKE without
// FUTEX_PRIVATE_FLAG): wakes every waiter on `word`; waits while *word is
// `seen`, at most `timeout_ns` (0: no limit), or until woken.
void WakeStatsWord(uint32_t* word);
void WaitStatsWord(uint32_t* word, uint32_t seen, uint64_t timeout_ns);

}  // namespace mrcache

#endif  // MRCACHE_STATS_PAGE_H_
