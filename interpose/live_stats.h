// live_stats.h: what mrcache-info prints from live statistics pages
// (mrcache/stats_page.h): one process as text or JSON, rates between two
// readings (--watch), the Prometheus text exposition format, and the list
// of this user's publishing processes (pages of dead processes removed).
#ifndef INTERPOSE_LIVE_STATS_H_
#define INTERPOSE_LIVE_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "mrcache/stats_page.h"

namespace mrcache_info {

// Bytes as the key table writes sizes when exact (4K, 1G), else to one
// decimal in binary units (4.4M).
std::string Size(uint64_t bytes);

// The command name of `pid` (/proc/PID/comm), "?" if unknown.
std::string CommandOf(pid_t pid);

// One process's caches, a few lines per cache; `now_unix_ns` dates the
// figures ("updated 0.1 s ago").
std::string FormatProcessText(const mrcache::ProcessSnapshot& p, uint64_t now_unix_ns);
// One JSON object (see mrcache-info(1) for its keys).
std::string FormatProcessJson(const mrcache::ProcessSnapshot& p);
// Per-second rates of hits, misses and registrations between two readings
// of the same process `seconds` apart, one line per cache of `now` (a cache
// new since `before` is rated from zero): over the time between the two
// refreshes the readings asked for (each slot's updated_unix_ns), or
// `seconds` where the process did not refresh in between.
std::string FormatRates(const mrcache::ProcessSnapshot& before, const mrcache::ProcessSnapshot& now,
                        double seconds);
// The Prometheus text exposition format (version 0.0.4) of `processes`:
// metrics mrcache_*, labels pid, cache, rail; one HELP and TYPE per metric.
// A rails cache's rails are the mrcache_rail_* metrics, labelled with the
// rail's own name as rail and its index as rail_index.
std::string FormatPrometheus(const std::vector<mrcache::ProcessSnapshot>& processes);

struct ListedProcess {
  pid_t pid = 0;
  absl::StatusOr<mrcache::ProcessSnapshot> snapshot;  // or why it cannot be read
};
struct Listing {
  std::vector<ListedProcess> live;
  std::vector<pid_t> removed;  // pages of dead processes, removed
};
// The calling user's pages in /dev/shm: live processes' (read), and the
// pages of processes that are gone (or whose pid a newer process took),
// which are removed. Pages of other users are not looked at.
Listing ListLivePages();

}  // namespace mrcache_info

#endif  // INTERPOSE_LIVE_STATS_H_
