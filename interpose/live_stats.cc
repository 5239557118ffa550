#include "interpose/live_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/config.h"

namespace mrcache_info {
namespace {

using mrcache::CacheSnapshot;
using mrcache::kStatCounters;
using mrcache::kStatHistograms;
using mrcache::kStatsBuckets;
using mrcache::kStatsCounterInfo;
using mrcache::kStatsHistogramInfo;
using mrcache::ProcessSnapshot;

uint64_t Counter(const CacheSnapshot& c, int i) { return c.counters[i]; }

// Inclusive upper bound of bucket b (log2_histogram.h); the last is +Inf.
uint64_t BucketBound(int b) { return uint64_t{1} << b; }

}  // namespace

std::string Size(uint64_t bytes) {
  const std::string exact = mrcache::FormatSize(bytes);
  if (bytes < 1024 || exact.back() < '0' || exact.back() > '9') return exact;
  const char* units = "KMGT";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  return absl::StrFormat("%.1f%c", v, units[u]);
}

namespace {

std::string Duration(uint64_t ns) {
  if (ns < 1000) return absl::StrCat(ns, "ns");
  if (ns < 1000000) return absl::StrFormat("%.3gus", ns / 1e3);
  if (ns < 1000000000) return absl::StrFormat("%.3gms", ns / 1e6);
  return absl::StrFormat("%.3gs", ns / 1e9);
}

// Non-empty buckets as "<=BOUND:COUNT", bounds as sizes or durations.
std::string HistogramLine(const uint64_t* counts, bool ns) {
  std::string out;
  for (int b = 0; b < kStatsBuckets; ++b) {
    if (counts[b] == 0) continue;
    const std::string bound =
        b == kStatsBuckets - 1
            ? std::string("more")
            : absl::StrCat("<=", ns ? Duration(BucketBound(b)) : Size(BucketBound(b)));
    absl::StrAppend(&out, out.empty() ? "" : " ", bound, ":", counts[b]);
  }
  return out.empty() ? "-" : out;
}

// Which of its events histogram `h` counts: a sample of each kind.
std::string SampleNote(int h) {
  const uint64_t every = mrcache::kHistogramSampleEvery;
  if (h == mrcache::kHistRegionBytes) return absl::StrCat("   (one registration in ", every, ")");
  if (h == mrcache::kHistMissNs || h == mrcache::kHistGetBytes) {
    return absl::StrCat("   (one miss in ", every, ")");
  }
  if (h == mrcache::kHistRegisterNs) {
    return absl::StrCat("   (misses' registrations: one in ", every, " timed)");
  }
  return absl::StrCat("   (one in ", every, " timed)");
}

std::string Labels(pid_t pid, const CacheSnapshot& c) {
  // ParseStatsPage admits no quote, backslash or control byte in names.
  return absl::StrCat("pid=\"", pid, "\",cache=\"", c.cache_id, "\",rail=\"", c.rail, "\"");
}

// One rail of a rails cache: rail is the rail's own name, rail_index tells
// apart rails of one name (custom rails are all "custom").
std::string RailLabels(pid_t pid, const CacheSnapshot& c, size_t r) {
  return absl::StrCat("pid=\"", pid, "\",cache=\"", c.cache_id, "\",rail=\"", c.rails[r].name,
                      "\",rail_index=\"", r, "\"");
}

// "# HELP" and "# TYPE" of the metric mrcache_<info.prometheus>.
std::string PromFamily(const mrcache::StatsCounterInfo& info) {
  return absl::StrCat("# HELP mrcache_", info.prometheus, " ", info.help, "\n# TYPE mrcache_",
                      info.prometheus, info.gauge ? " gauge\n" : " counter\n");
}

// A rails cache's rails, one line each, as FormatProcessText prints them.
std::string RailLines(const CacheSnapshot& c) {
  if (c.rails.empty()) return "";
  std::string out = absl::StrFormat("  rails:             %u\n", c.rails.size());
  for (size_t r = 0; r < c.rails.size(); ++r) {
    const uint64_t* k = c.rails[r].counters;
    absl::StrAppendFormat(
        &out,
        "    rail %u %s: regions %u (registrations %u, deregistrations %u), registered %s, "
        "registrar time %s\n",
        r, c.rails[r].name, k[mrcache::kRailRegions], k[mrcache::kRailRegistrations],
        k[mrcache::kRailDeregistrations], Size(k[mrcache::kRailRegisteredBytes]),
        Duration(k[mrcache::kRailRegistrarNs]));
  }
  return out;
}

// `s` as a JSON string: free text (a command name) is escaped, not trusted.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(ch));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string PromNumber(uint64_t v, bool nanoseconds) {
  if (!nanoseconds) return absl::StrCat(v);
  return absl::StrFormat("%.9g", static_cast<double>(v) / 1e9);
}

}  // namespace

std::string CommandOf(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/comm", static_cast<int>(pid));
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return "?";
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return "?";
  buf[strcspn(buf, "\n")] = '\0';
  return buf;
}

std::string FormatProcessText(const ProcessSnapshot& p, uint64_t now_unix_ns) {
  std::string out = absl::StrFormat(
      "process %d (%s): %u cache(s) published, %s%s\n", p.pid, CommandOf(p.pid), p.caches.size(),
      p.refreshed_on_request
          ? "refreshed for this reading"
          : absl::StrFormat("NOT refreshed for this reading (no answer within %.1f s: the process "
                            "is stopped, or a cache's lock was held that long)",
                            mrcache::kStatsRefreshWaitNs / 1e9),
      p.unpublished ? absl::StrCat("; ", p.unpublished, " more found no slot") : "");
  for (const CacheSnapshot& c : p.caches) {
    const uint64_t hits = Counter(c, mrcache::kStatHits), misses = Counter(c, mrcache::kStatMisses);
    const uint64_t age = now_unix_ns > c.updated_unix_ns ? now_unix_ns - c.updated_unix_ns : 0;
    const uint64_t budget = Counter(c, mrcache::kStatPinBudgetBytes);
    const uint64_t max_bytes = Counter(c, mrcache::kStatMaxBytes);
    absl::StrAppendFormat(&out, "cache %u: rail %s, registrar %s, figures %.1f s old\n", c.cache_id,
                          c.rail, c.registrar, age / 1e9);
    absl::StrAppendFormat(&out, "  hits / misses:     %u / %u   hit rate %s\n", hits, misses,
                          hits + misses == 0
                              ? std::string("- (no gets yet)")
                              : absl::StrFormat("%.1f%%", 100.0 * hits / (hits + misses)));
    absl::StrAppendFormat(&out, "  regions:           %u (registrations %u, deregistrations %u)\n",
                          Counter(c, mrcache::kStatRegions),
                          Counter(c, mrcache::kStatRegistrations),
                          Counter(c, mrcache::kStatDeregistrations));
    absl::StrAppendFormat(&out, "  pinned bytes:      %s (peak %s; pin budget %s; max_bytes %s)\n",
                          Size(Counter(c, mrcache::kStatPinnedBytes)),
                          Size(Counter(c, mrcache::kStatPeakPinnedBytes)),
                          budget == 0 ? std::string("none") : Size(budget),
                          max_bytes == 0 ? std::string("unlimited") : Size(max_bytes));
    absl::StrAppendFormat(
        &out,
        "  evictions %u, invalidations %u, merges %u, bypassed %u, "
        "remote_private %u, registrar failures %u, watch failures %u\n",
        Counter(c, mrcache::kStatEvictions), Counter(c, mrcache::kStatInvalidations),
        Counter(c, mrcache::kStatMerges), Counter(c, mrcache::kStatBypassed),
        Counter(c, mrcache::kStatRemotePrivate), Counter(c, mrcache::kStatRegistrarFailures),
        Counter(c, mrcache::kStatWatchFailures));
    absl::StrAppendFormat(&out, "  registrar time:    %s\n",
                          Duration(Counter(c, mrcache::kStatRegistrarNs)));
    const uint64_t background_ns = Counter(c, mrcache::kStatBackgroundDeregNs);
    absl::StrAppendFormat(
        &out,
        "  dereg queue:       depth %u, callers waited %s, background thread deregistered for "
        "%s%s\n",
        Counter(c, mrcache::kStatDeregQueueDepth), Duration(Counter(c, mrcache::kStatDeregWaitNs)),
        Duration(background_ns),
        background_ns == 0 && Counter(c, mrcache::kStatDeregQueueDepth) == 0
            ? "   (nothing handed to it yet: async_dereg off, or every batch under "
              "async_dereg_bytes and async_dereg_invalidated_bytes or from mrc_invalidate)"
            : "");
    out += RailLines(c);
    for (int h = 0; h < kStatHistograms; ++h) {
      absl::StrAppendFormat(&out, "  %-18s %s%s\n", absl::StrCat(kStatsHistogramInfo[h].name, ":"),
                            HistogramLine(c.histograms[h], kStatsHistogramInfo[h].nanoseconds),
                            SampleNote(h));
    }
  }
  return out;
}

std::string FormatProcessJson(const ProcessSnapshot& p) {
  std::string out = absl::StrFormat(
      "{\"pid\": %d, \"command\": %s, \"interval_ns\": %u, \"refreshed_on_request\": %s, "
      "\"unpublished\": %u, \"caches\": [",
      p.pid, JsonString(CommandOf(p.pid)), p.interval_ns, p.refreshed_on_request ? "true" : "false",
      p.unpublished);
  for (size_t i = 0; i < p.caches.size(); ++i) {
    const CacheSnapshot& c = p.caches[i];
    absl::StrAppendFormat(&out,
                          "%s{\"cache\": %u, \"rail\": \"%s\", \"registrar\": \"%s\", "
                          "\"updated_unix_ns\": %u",
                          i ? ", " : "", c.cache_id, c.rail, c.registrar, c.updated_unix_ns);
    for (int k = 0; k < kStatCounters; ++k) {
      absl::StrAppendFormat(&out, ", \"%s\": %u", kStatsCounterInfo[k].name, c.counters[k]);
    }
    out += ", \"histograms\": {";
    for (int h = 0; h < kStatHistograms; ++h) {
      absl::StrAppendFormat(&out, "%s\"%s\": {\"sum\": %u, \"buckets\": [", h ? ", " : "",
                            kStatsHistogramInfo[h].name, c.histogram_sums[h]);
      for (int b = 0; b < kStatsBuckets; ++b) {
        absl::StrAppend(&out, b ? ", " : "", c.histograms[h][b]);
      }
      out += "]}";
    }
    out += "}, \"rails\": [";
    for (size_t r = 0; r < c.rails.size(); ++r) {
      absl::StrAppendFormat(&out, "%s{\"rail\": %u, \"name\": \"%s\"", r ? ", " : "", r,
                            c.rails[r].name);
      for (int k = 0; k < mrcache::kStatRailCounters; ++k) {
        absl::StrAppendFormat(&out, ", \"%s\": %u", mrcache::kStatsRailCounterInfo[k].name,
                              c.rails[r].counters[k]);
      }
      out += "}";
    }
    out += "]}";
  }
  return out + "]}\n";
}

std::string FormatRates(const ProcessSnapshot& before, const ProcessSnapshot& now, double seconds) {
  std::string out;
  for (const CacheSnapshot& c : now.caches) {
    const CacheSnapshot* was = nullptr;
    for (const CacheSnapshot& b : before.caches) {
      if (b.cache_id == c.cache_id) was = &b;
    }
    // Over the time between the two refreshes where the process made both
    // (the figures' own span), else between the readings.
    const double span = was != nullptr && c.updated_unix_ns > was->updated_unix_ns
                            ? (c.updated_unix_ns - was->updated_unix_ns) / 1e9
                            : seconds;
    auto rate = [&](int k) {
      const uint64_t from = was != nullptr ? was->counters[k] : 0;
      return c.counters[k] >= from ? (c.counters[k] - from) / span : 0.0;
    };
    absl::StrAppendFormat(&out,
                          "cache %u (%s): hits/s %.1f, misses/s %.1f, registrations/s %.1f, "
                          "pinned %s\n",
                          c.cache_id, c.rail, rate(mrcache::kStatHits), rate(mrcache::kStatMisses),
                          rate(mrcache::kStatRegistrations),
                          Size(c.counters[mrcache::kStatPinnedBytes]));
  }
  return out.empty() ? "no caches published\n" : out;
}

std::string FormatPrometheus(const std::vector<ProcessSnapshot>& processes) {
  std::string out;
  for (int k = 0; k < kStatCounters; ++k) {
    const auto& info = kStatsCounterInfo[k];
    out += PromFamily(info);
    for (const ProcessSnapshot& p : processes) {
      for (const CacheSnapshot& c : p.caches) {
        absl::StrAppend(&out, "mrcache_", info.prometheus, "{", Labels(p.pid, c), "} ",
                        PromNumber(c.counters[k], info.nanoseconds), "\n");
      }
    }
  }
  for (int k = 0; k < mrcache::kStatRailCounters; ++k) {
    const auto& info = mrcache::kStatsRailCounterInfo[k];
    out += PromFamily(info);
    for (const ProcessSnapshot& p : processes) {
      for (const CacheSnapshot& c : p.caches) {
        for (size_t r = 0; r < c.rails.size(); ++r) {
          absl::StrAppend(&out, "mrcache_", info.prometheus, "{", RailLabels(p.pid, c, r), "} ",
                          PromNumber(c.rails[r].counters[k], info.nanoseconds), "\n");
        }
      }
    }
  }
  for (int h = 0; h < kStatHistograms; ++h) {
    const auto& info = kStatsHistogramInfo[h];
    absl::StrAppend(&out, "# HELP mrcache_", info.prometheus, " ", info.help, "\n# TYPE mrcache_",
                    info.prometheus, " histogram\n");
    for (const ProcessSnapshot& p : processes) {
      for (const CacheSnapshot& c : p.caches) {
        const std::string labels = Labels(p.pid, c);
        uint64_t cumulative = 0;
        for (int b = 0; b < kStatsBuckets - 1; ++b) {
          cumulative += c.histograms[h][b];
          absl::StrAppend(&out, "mrcache_", info.prometheus, "_bucket{", labels, ",le=\"",
                          PromNumber(BucketBound(b), info.nanoseconds), "\"} ", cumulative, "\n");
        }
        cumulative += c.histograms[h][kStatsBuckets - 1];
        absl::StrAppend(&out, "mrcache_", info.prometheus, "_bucket{", labels, ",le=\"+Inf\"} ",
                        cumulative, "\n");
        absl::StrAppend(&out, "mrcache_", info.prometheus, "_sum{", labels, "} ",
                        PromNumber(c.histogram_sums[h], info.nanoseconds), "\n");
        absl::StrAppend(&out, "mrcache_", info.prometheus, "_count{", labels, "} ", cumulative,
                        "\n");
      }
    }
  }
  return out;
}

Listing ListLivePages() {
  Listing listing;
  const uid_t uid = getuid();
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return listing;
  std::vector<pid_t> pids;
  while (dirent* e = readdir(dir)) {
    const pid_t pid = mrcache::PidOfStatsPageName(e->d_name, uid);
    if (pid > 0) pids.push_back(pid);
  }
  closedir(dir);
  std::sort(pids.begin(), pids.end());
  for (pid_t pid : pids) {
    const std::string path = mrcache::StatsPagePath(uid, pid);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid) continue;
    // Alive: the process exists, is this user's, and is the one that wrote
    // the page (a pid reused by a newer process has another start time).
    // A page whose process is gone is not read: no one would answer its
    // request for a refresh.
    const bool exists = kill(pid, 0) == 0;
    absl::StatusOr<mrcache::ProcessSnapshot> snapshot =
        exists ? mrcache::ReadStatsPageAt(path, pid)
               : absl::StatusOr<mrcache::ProcessSnapshot>(absl::NotFoundError("gone"));
    const uint64_t start = mrcache::ProcessStartTicks(pid);
    const bool same_process =
        exists && start != 0 &&
        (!snapshot.ok() || snapshot->start_ticks == 0 || snapshot->start_ticks == start);
    if (!same_process) {
      if (unlink(path.c_str()) == 0) listing.removed.push_back(pid);
      continue;
    }
    listing.live.push_back(ListedProcess{pid, std::move(snapshot)});
  }
  return listing;
}

}  // namespace mrcache_info
