#include "interpose/stats_report.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache_preload {
namespace {

struct Derived {
  double hit_rate = 0;
  uint64_t direct_registrations = 0;  // direct ones that succeeded
  uint64_t device_registrations = 0;
  uint64_t avoided = 0;
  uint64_t mean_registrar_ns = 0;
  uint64_t saved_ns = 0;
};

Derived Derive(const Report& r) {
  Derived d;
  const uint64_t lookups = r.cache.hits + r.cache.misses;
  d.hit_rate = lookups == 0 ? 0.0 : static_cast<double>(r.cache.hits) / lookups;
  const uint64_t direct = r.shim.bypassed + r.shim.fallbacks;
  d.direct_registrations = direct > r.shim.direct_failures ? direct - r.shim.direct_failures : 0;
  d.device_registrations = r.cache.registrations + d.direct_registrations;
  const uint64_t not_avoided = d.device_registrations + r.shim.failed;
  d.avoided = r.shim.calls > not_avoided ? r.shim.calls - not_avoided : 0;
  d.mean_registrar_ns =
      r.cache.registrations == 0 ? 0 : r.cache.registrar_ns / r.cache.registrations;
  const uint64_t net = r.uncached.uncached_ns > r.cache.registrar_ns
                           ? r.uncached.uncached_ns - r.cache.registrar_ns
                           : 0;
  // Only hits save: at most their share of what the served requests cost.
  const uint64_t hits = std::min(r.cache.hits, r.uncached.requests);
  const uint64_t hits_share =
      r.uncached.requests == 0 ? 0
                               : static_cast<uint64_t>(static_cast<double>(r.uncached.uncached_ns) *
                                                       static_cast<double>(hits) /
                                                       static_cast<double>(r.uncached.requests));
  d.saved_ns = std::min(net, hits_share);
  return d;
}

std::string Bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrCat(n, " B") : absl::StrFormat("%.1f %s", v, units[u]);
}

// One line per rail, after a count line, as mrcache-info prints a rails
// cache's rails.
std::string RailLines(const std::vector<RailTotals>& rails) {
  std::string out = absl::StrFormat(
      "  rails (devices):         %u (each device's PD caches; regions and registered bytes at "
      "exit)\n",
      rails.size());
  for (size_t i = 0; i < rails.size(); ++i) {
    const RailTotals& rail = rails[i];
    const mrcache::CacheStats& s = rail.stats;
    absl::StrAppendFormat(&out,
                          "    rail %u %s: hits / misses %u / %u, regions %u (registrations %u, "
                          "deregistrations %u), registered %s (peak %s), registrar time %.3f ms, "
                          "PD caches %u\n",
                          i, rail.name, s.hits, s.misses, s.regions, s.registrations,
                          s.deregistrations, Bytes(s.pinned_bytes), Bytes(s.peak_pinned_bytes),
                          s.registrar_ns / 1e6, rail.pd_caches);
  }
  return out;
}

// The rails as a JSON array, each rail's keys named as mrcache-info's.
std::string RailsJson(const std::vector<RailTotals>& rails) {
  std::string out = "[";
  for (size_t i = 0; i < rails.size(); ++i) {
    const RailTotals& rail = rails[i];
    const mrcache::CacheStats& s = rail.stats;
    absl::StrAppendFormat(&out,
                          "%s{\"rail\": %u, \"name\": \"%s\", \"pd_caches\": %u, \"hits\": %u, "
                          "\"misses\": %u, \"registrations\": %u, \"deregistrations\": %u, "
                          "\"regions\": %u, \"registered_bytes\": %u, "
                          "\"peak_registered_bytes\": %u, \"registrar_ns\": %u}",
                          i ? ", " : "", i, rail.name, rail.pd_caches, s.hits, s.misses,
                          s.registrations, s.deregistrations, s.regions, s.pinned_bytes,
                          s.peak_pinned_bytes, s.registrar_ns);
  }
  return out + "]";
}

}  // namespace

bool ReportRequested(const char* spec) {
  return spec != nullptr && *spec != '\0' && std::strcmp(spec, "0") != 0;
}

std::string FormatText(const Report& r) {
  const Derived d = Derive(r);
  std::string out = "mrcache: libmrcache_preload summary\n";
  if (!r.disabled.empty()) absl::StrAppend(&out, "  caching disabled:        ", r.disabled, "\n");
  absl::StrAppendFormat(&out,
                        "  registration calls:      %u (through the cache %u, direct %u by rule, "
                        "%u after a cache error)\n",
                        r.shim.calls, r.shim.cache_lookups, r.shim.bypassed, r.shim.fallbacks);
  absl::StrAppendFormat(&out, "  hits / misses:           %u / %u   hit rate %.1f%%\n",
                        r.cache.hits, r.cache.misses, 100.0 * d.hit_rate);
  absl::StrAppendFormat(&out, "  device registrations:    %u (cache %u, direct %u)   avoided %u\n",
                        d.device_registrations, r.cache.registrations, d.direct_registrations,
                        d.avoided);
  absl::StrAppendFormat(&out,
                        "  failed requests:         %u (answered with the device's error, each "
                        "counted once; %u of them registered directly)\n",
                        r.shim.failed, r.shim.direct_failures);
  const std::string basis =
      r.uncached.samples != 0
          ? absl::StrFormat("%u of them registered again to time them", r.uncached.samples)
          : absl::StrFormat("the caches' %u first-time registrations, dearer than repeats",
                            r.uncached.measured_registrations);
  if (r.cache.hits == 0) {
    absl::StrAppendFormat(&out,
                          "  registrar time saved:    0 ms (no hits: only a hit saves a "
                          "registration; the caches spent %.3f ms registering)\n",
                          r.cache.registrar_ns / 1e6);
  } else {
    absl::StrAppendFormat(
        &out,
        "  registrar time saved:    %.3f ms (estimate: registering each of the %u requests served "
        "at its own size would have cost %.3f ms, priced by size class from %s; the caches spent "
        "%.3f ms; at most the %u hits' share)\n",
        d.saved_ns / 1e6, r.uncached.requests, r.uncached.uncached_ns / 1e6, basis,
        r.cache.registrar_ns / 1e6, r.cache.hits);
  }
  absl::StrAppendFormat(&out, "  peak pinned bytes:       %s (sum of per-PD peaks)\n",
                        Bytes(r.cache.peak_pinned_bytes));
  absl::StrAppendFormat(&out,
                        "  remote keys:             %s (%u requests with remote rights registered "
                        "privately, each deregistered at its ibv_dereg_mr)\n",
                        r.remote_keys.empty() ? "-" : r.remote_keys, r.cache.remote_private);
  const size_t memlock = mrcache::MemlockLimitThatApplies();
  absl::StrAppendFormat(
      &out, "  pin budget:              %s\n",
      r.cache.pin_budget_bytes == 0
          ? std::string(memlock == 0 ? "no limit (RLIMIT_MEMLOCK unlimited, or CAP_IPC_LOCK)"
                        : r.shim.caches == 0 ? "none yet (no PD cache was created)"
                                             : "no limit: the caches' registrations pin nothing "
                                               "(on-demand paging)")
          : absl::StrCat(Bytes(r.cache.pin_budget_bytes),
                         " shared by the process's caches (RLIMIT_MEMLOCK ",
                         memlock ? Bytes(memlock) : std::string("does not apply"), ")"));
  absl::StrAppendFormat(&out, "  invalidations / evictions / merges: %u / %u / %u\n",
                        r.cache.invalidations, r.cache.evictions, r.cache.merges);
  absl::StrAppendFormat(
      &out,
      "  watch failures:          %u (ENOMEM %u, EBUSY %u: the application's own userfaultfd, "
      "EPERM %u, EINVAL %u: memory uffd cannot track, map-count limit %u, other %u)\n",
      r.cache.watch_failures, r.cache.watch_enomem, r.cache.watch_ebusy, r.cache.watch_eperm,
      r.cache.watch_einval, r.cache.watch_map_limit, r.cache.watch_other);
  absl::StrAppendFormat(&out,
                        "  deregs: %u of aliases, %u passed through; rereg conversions %u; "
                        "EBUSY deallocs %u; PD caches %u; monitor %s\n",
                        r.shim.alias_deregs, r.shim.passthrough_deregs, r.shim.rereg_conversions,
                        r.shim.busy_deallocs, r.shim.caches, r.monitor.empty() ? "-" : r.monitor);
  absl::StrAppendFormat(&out,
                        "  monitor incomplete:      %u PD cache(s) (covering less than "
                        "monitor=auto promises; the cause was logged at creation)\n",
                        r.cache.monitor_incomplete);
  absl::StrAppendFormat(&out,
                        "  background deregistration: %u region(s) queued now; callers waited "
                        "%.3f ms for the queue; the thread deregistered for %.3f ms "
                        "(async_dereg)\n",
                        r.cache.dereg_queue_depth, r.cache.dereg_wait_ns / 1e6,
                        r.cache.background_dereg_ns / 1e6);
  out += RailLines(r.rails);
  return out;
}

std::string FormatJson(const Report& r) {
  const Derived d = Derive(r);
  return absl::StrFormat(
      "{\"calls\": %u, \"cache_lookups\": %u, \"bypassed\": %u, \"fallbacks\": %u, "
      "\"hits\": %u, \"misses\": %u, \"hit_rate\": %.6f, \"failed\": %u, \"direct_failures\": %u, "
      "\"device_registrations\": %u, \"cache_registrations\": %u, \"registrations_avoided\": %u, "
      "\"deregistrations\": %u, \"invalidations\": %u, \"evictions\": %u, \"merges\": %u, "
      "\"registrar_ns\": %u, \"mean_registrar_ns_per_registration\": %u, "
      "\"registrar_ns_saved_estimate\": %u, \"registrar_ns_uncached_estimate\": %u, "
      "\"registrar_cost_samples\": %u, \"estimate_method\": \"each request served priced at the "
      "mean "
      "register+deregister time of its size class, sampled in this run, minus registrar_ns, at "
      "most the hits' share (0 without hits)\", "
      "\"peak_pinned_bytes\": %u, "
      "\"alias_deregs\": %u, \"passthrough_deregs\": %u, \"rereg_conversions\": %u, "
      "\"busy_deallocs\": %u, \"pd_caches\": %u, \"monitor\": \"%s\", \"disabled\": \"%s\", "
      "\"remote_keys\": \"%s\", \"remote_private\": %u, \"monitor_incomplete\": %u, "
      "\"pin_budget_bytes\": %u, \"memlock_limit_bytes\": %u, "
      "\"watch_failures\": %u, \"watch_enomem\": %u, \"watch_ebusy\": %u, \"watch_eperm\": %u, "
      "\"watch_einval\": %u, \"watch_map_limit\": %u, \"watch_other\": %u, "
      "\"dereg_queue_depth\": %u, \"dereg_wait_ns\": %u, \"background_dereg_ns\": %u, "
      "\"rails\": %s}\n",
      r.shim.calls, r.shim.cache_lookups, r.shim.bypassed, r.shim.fallbacks, r.cache.hits,
      r.cache.misses, d.hit_rate, r.shim.failed, r.shim.direct_failures, d.device_registrations,
      r.cache.registrations, d.avoided, r.cache.deregistrations, r.cache.invalidations,
      r.cache.evictions, r.cache.merges, r.cache.registrar_ns, d.mean_registrar_ns, d.saved_ns,
      r.uncached.uncached_ns, r.uncached.samples, r.cache.peak_pinned_bytes, r.shim.alias_deregs,
      r.shim.passthrough_deregs, r.shim.rereg_conversions, r.shim.busy_deallocs, r.shim.caches,
      r.monitor, r.disabled, r.remote_keys, r.cache.remote_private, r.cache.monitor_incomplete,
      r.cache.pin_budget_bytes, mrcache::MemlockLimitThatApplies(), r.cache.watch_failures,
      r.cache.watch_enomem, r.cache.watch_ebusy, r.cache.watch_eperm, r.cache.watch_einval,
      r.cache.watch_map_limit, r.cache.watch_other, r.cache.dereg_queue_depth,
      r.cache.dereg_wait_ns, r.cache.background_dereg_ns, RailsJson(r.rails));
}

absl::Status EmitReport(absl::string_view spec, const Report& report) {
  if (spec == "1") {
    std::string text = FormatText(report);
    std::fwrite(text.data(), 1, text.size(), stderr);
    return absl::OkStatus();
  }
  if (absl::StartsWith(spec, "json:") && spec.size() > 5) {
    std::string path(spec.substr(5));
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      int err = errno;
      return mrcache::ErrnoStatus(
          err, absl::StrCat("MRCACHE_STATS: cannot open ", path, ": ", strerror(err)));
    }
    std::string json = FormatJson(report);
    bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return mrcache::ErrnoStatus(EIO, absl::StrCat("MRCACHE_STATS: cannot write ", path));
    return absl::OkStatus();
  }
  return mrcache::ErrnoStatus(EINVAL,
                              absl::StrCat("MRCACHE_STATS='", spec, "': expected 1 or json:PATH"));
}

}  // namespace mrcache_preload
