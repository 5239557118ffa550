// stats_report.h: what the shim tells the user at exit (MRCACHE_STATS).
//
//   MRCACHE_STATS=1          a one-screen summary on stderr
//   MRCACHE_STATS=json:PATH  the same figures as one JSON object in PATH
//
// Derived figures (stated in the output too):
//  - hit rate = hits / (hits + misses) over cache lookups;
//  - device registrations = the registrations the caches made + the direct
//    ones that succeeded; a request that failed is counted once, as failed
//    (whether the device refused it through the cache or directly), never
//    as a registration;
//  - registrations avoided = application registration calls - device
//    registrations - failed requests;
//  - registrar time saved is an ESTIMATE, and comes from hits only: what
//    registering and deregistering each request the caches served at its own
//    size would have cost (priced per size class from every 64th request
//    registered again just to time it: registrar_costs.h) minus the registrar
//    time the caches spent, never below 0, and never above the hits' share of
//    that price (hits / requests served): without a hit nothing is saved. A
//    failed request is not served and is never priced;
//  - peak pinned bytes: the sum of each PD cache's peak (an upper bound when
//    several PDs are in use);
//  - remote keys: the remote_keys mode in force and how many requests with a
//    remote right it registered privately (cache.remote_private);
//  - monitor incomplete: how many PD caches run with less monitor coverage
//    than `auto` promises (cache.monitor_incomplete; each one logged its
//    cause on stderr when it was created).
//  - pin budget: the bytes the process's caches may pin together
//    (cache.pin_budget_bytes, README "Pinned-memory budget"; 0 = no limit)
//    and the RLIMIT_MEMLOCK it comes from.
//  - rails: the shim's rails are the devices (pd_caches.h): for each device
//    a PD cache was made on, the sums over its PD caches of hits, misses,
//    registrations, deregistrations, regions and registered (pinned) bytes
//    at exit, the sum of their peaks, and their registrar time. Direct
//    registrations are not in them. Named as mrcache-info names a rails
//    cache's rails (rail, name, registrations, deregistrations, regions,
//    registered_bytes, registrar_ns).
#ifndef INTERPOSE_STATS_REPORT_H_
#define INTERPOSE_STATS_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "interpose/pd_caches.h"
#include "interpose/registrar_costs.h"
#include "mrcache/cache.h"

namespace mrcache_preload {

// Counted by the interposers themselves.
struct ShimCounters {
  uint64_t calls = 0;               // application ibv_reg_mr* calls
  uint64_t cache_lookups = 0;       // of those, served by a cache (hit or miss)
  uint64_t bypassed = 0;            // registered directly by rule (shim.h), dmabuf included
  uint64_t fallbacks = 0;           // the cache failed; registered directly instead
  uint64_t alias_deregs = 0;        // ibv_dereg_mr of an alias (a put)
  uint64_t passthrough_deregs = 0;  // ibv_dereg_mr of an MR the shim did not create
  uint64_t rereg_conversions = 0;   // aliases turned into dedicated registrations
  uint64_t busy_deallocs = 0;       // ibv_dealloc_pd refused with EBUSY
  uint64_t caches = 0;              // PD caches created
  uint64_t failed = 0;              // calls answered with an error (each counted once)
  uint64_t direct_failures = 0;     // of those, direct registrations the device refused
};

struct Report {
  ShimCounters shim;
  mrcache::CacheStats cache;          // summed over every PD cache of the run
  std::string monitor;                // the monitors in effect ("" if no cache was made)
  std::string disabled;               // why the shim passes everything through ("" if it caches)
  std::string remote_keys;            // the remote_keys mode in force ("" while disabled)
  RegistrarCosts::Estimate uncached;  // the requests served, priced without a cache
  std::vector<RailTotals> rails;      // `cache` by device, in order of name
};

// True if `spec` (the value of MRCACHE_STATS, or null) asks for a report:
// set, not empty and not "0".
bool ReportRequested(const char* spec);

std::string FormatText(const Report& report);
std::string FormatJson(const Report& report);

// Emits the report as `spec` (the value of MRCACHE_STATS) says. EINVAL for an
// unknown spec; the errno of fopen/fwrite for an unwritable PATH.
absl::Status EmitReport(absl::string_view spec, const Report& report);

}  // namespace mrcache_preload

#endif  // INTERPOSE_STATS_REPORT_H_
