// mrcache_info.cc: mrcache-info, what mrcache would do in this environment
// (in the spirit of ucx_info / fi_info):
//  - the configuration in effect: every key with its value, after defaults
//    and the MRCACHE_* environment (an invalid variable is reported);
//  - the shim's own settings (MRCACHE_STATS, and the remote_keys mode it runs
//    in: private unless MRCACHE_REMOTE_KEYS says otherwise);
//  - the RDMA devices libibverbs lists, their limits and ODP capabilities
//    (ibv_query_device_ex), and the ODP mode a cache would run in there;
//  - which memory monitors can be installed in this process (each one is
//    acquired and released again), and for `uffd`: whether it can watch a
//    fresh anonymous mapping here, the map-count limit it keeps, and where
//    a cache reports the ranges it could not watch;
//  - the pinned-memory budget a cache created here would get (README
//    "Pinned-memory budget"), and that on-demand paging and registrars
//    that pin nothing (sim without sim_mlock, custom_pins=0) need none.
// Exit status: 0; 1 if the MRCACHE_* environment is invalid; 2 bad usage.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "interpose/live_stats.h"
#include "interpose/shim_defaults.h"
#include "mrcache/cache.h"
#include "mrcache/config.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/monitor_table.h"
#include "mrcache/monitors/uffd_monitor.h"
#include "mrcache/registrars/odp.h"
#include "mrcache/registrars/pin_budget.h"
#include "mrcache/registrars/verbs_registrar.h"
#include "mrcache/stats_page.h"

namespace {

const char* OdpModeName(mrcache::OdpMode mode) {
  switch (mode) {
    case mrcache::OdpMode::kOff:
      return "off";
    case mrcache::OdpMode::kExplicit:
      return "explicit";
    case mrcache::OdpMode::kImplicit:
      return "implicit";
    case mrcache::OdpMode::kAuto:
      return "auto";
  }
  return "?";
}

std::string TransportCaps(uint32_t caps) {
  static const struct {
    uint32_t bit;
    const char* name;
  } kBits[] = {{IBV_ODP_SUPPORT_SEND, "send"},     {IBV_ODP_SUPPORT_RECV, "recv"},
               {IBV_ODP_SUPPORT_WRITE, "write"},   {IBV_ODP_SUPPORT_READ, "read"},
               {IBV_ODP_SUPPORT_ATOMIC, "atomic"}, {IBV_ODP_SUPPORT_SRQ_RECV, "srq_recv"}};
  std::string out;
  for (const auto& b : kBits) {
    if (caps & b.bit) absl::StrAppend(&out, out.empty() ? "" : ",", b.name);
  }
  return out.empty() ? "-" : out;
}

// What the rkey of a pool buffer reaches (mrcache.h, "What an rkey reaches").
void PrintPoolRkeyScope(const mrcache::Config& config) {
  std::printf("\nPool of pre-registered buffers (mrc_pool_*, libmrcache_pool.so):\n");
  constexpr int kRemote =
      mrcache::kAccessRemoteRead | mrcache::kAccessRemoteWrite | mrcache::kAccessRemoteAtomic;
  if ((config.pool_access & kRemote) == 0) {
    std::printf("  %-20s = none (pool_access grants no remote right)\n", "rkey scope");
    return;
  }
  std::printf(
      "  %-20s = whole chunk: a buffer's rkey reaches every byte of its %s chunk%s "
      "(other buffers included), or of its own chunk if larger than half a chunk\n",
      "rkey scope", mrcache::FormatSize(config.pool_chunk_bytes).c_str(),
      config.pool_hugepages ? " (at least a huge page)" : "");
}

// The key table's Markdown (`code`, *emphasis*) as plain text.
std::string MarkdownToPlain(const char* text) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c != '`' && *c != '*') out += *c;
  }
  return out;
}

// Returns false if the environment is invalid (the defaults are shown then).
bool PrintConfig(mrcache::Config* config) {
  std::printf("Configuration in effect (defaults, then the MRCACHE_* environment):\n");
  bool ok = true;
  auto env = mrcache::Config::FromEnvironment();
  if (env.ok()) {
    *config = *env;
  } else {
    ok = false;
    std::printf("  error: %s\n  (showing the defaults)\n",
                std::string(env.status().message()).c_str());
  }
  for (const mrcache::ConfigKeyInfo& key : mrcache::Config::KeyTable()) {
    auto value = config->Show(key.name);
    std::string name = absl::StrCat("MRCACHE_", key.name);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const bool set = std::getenv(name.c_str()) != nullptr;
    std::string shown = !value.ok() ? "?" : value->empty() ? "\"\"" : *value;
    // An empty value means "the default rule": say what that rule is.
    const std::string empty_means =
        value.ok() && value->empty()
            ? absl::StrCat("  (empty: ", MarkdownToPlain(key.default_value), ")")
            : "";
    std::printf("  %-20s = %-12s%s%s%s%s\n", key.name, shown.c_str(), empty_means.c_str(),
                set ? "  (from " : "", set ? name.c_str() : "", set ? ")" : "");
  }
  PrintPoolRkeyScope(*config);
  const char* stats = std::getenv("MRCACHE_STATS");
  std::printf("\nPreload shim (libmrcache_preload.so):\n");
  std::printf("  %-20s = %s\n", "MRCACHE_STATS", stats != nullptr ? stats : "(unset: no summary)");
  std::printf("  %-20s = %s\n", "registrar", "verbs on the application's PD (one cache per PD)");
  auto shim = mrcache::Config::FromEnvironment(mrcache_preload::ShimDefaults());
  std::printf("  %-20s = %-12s%s\n", "remote_keys",
              shim.ok() ? mrcache::RemoteKeysName(shim->remote_keys) : "?",
              std::getenv("MRCACHE_REMOTE_KEYS") != nullptr
                  ? "  (from MRCACHE_REMOTE_KEYS)"
                  : "  (the shim's default; the library's is shared)");
  return ok;
}

// The longest region a cache on a device registers: its max_mr_size
// (`device_limit`, 0: none stated) or max_region_bytes if lower (0: unset).
void PrintLongestRegion(size_t device_limit, size_t max_region_bytes) {
  if (device_limit == 0 && max_region_bytes == 0) {
    std::printf("    longest region: no limit (the device states no max_mr_size)\n");
    return;
  }
  const bool key_lower =
      max_region_bytes != 0 && (device_limit == 0 || max_region_bytes < device_limit);
  std::printf("    longest region: %s (%s): merging, bridging and alignment stop there\n",
              mrcache::FormatSize(key_lower ? max_region_bytes : device_limit).c_str(),
              key_lower ? "max_region_bytes" : "the device's max_mr_size");
}

void PrintDevices(const mrcache::Config& config) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const int err = errno;
  std::printf("\nRDMA devices (ibv_get_device_list): %d\n", list == nullptr ? 0 : n);
  if (list == nullptr || n == 0) {
    // libibverbs answers ENOSYS when the kernel has no RDMA device class at
    // all: that is "no device", not a missing function.
    std::string why;
    if (list == nullptr && err == ENOSYS) {
      why = " (no RDMA driver is loaded: /sys/class/infiniband is missing)";
    } else if (list == nullptr && err != 0) {
      why = absl::StrCat(" (ibv_get_device_list: ", std::strerror(err), ")");
    }
    std::printf(
        "  none: no RDMA device on this machine%s. registrar=verbs and the preload shim need "
        "one; registrar=uring and sim work without.\n",
        why.c_str());
    if (list != nullptr) ibv_free_device_list(list);
    return;
  }
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) {
      std::printf("  %s: cannot open: %s\n", name, std::strerror(errno));
      continue;
    }
    ibv_device_attr_ex attr;
    std::memset(&attr, 0, sizeof attr);
    int err = ibv_query_device_ex(ctx, nullptr, &attr);
    if (err != 0) {
      std::printf("  %s: ibv_query_device_ex failed: %s\n", name, std::strerror(err));
    } else {
      const ibv_odp_caps& odp = attr.odp_caps;
      std::printf(
          "  %s: fw %s, max_mr_size %llu, max_mr %d, page_size_cap 0x%llx\n", name,
          attr.orig_attr.fw_ver, static_cast<unsigned long long>(attr.orig_attr.max_mr_size),
          attr.orig_attr.max_mr, static_cast<unsigned long long>(attr.orig_attr.page_size_cap));
      std::printf("    odp general_caps: %s%s%s\n",
                  (odp.general_caps & IBV_ODP_SUPPORT) ? "ODP_SUPPORT " : "",
                  (odp.general_caps & IBV_ODP_SUPPORT_IMPLICIT) ? "ODP_SUPPORT_IMPLICIT" : "",
                  odp.general_caps == 0 ? "none" : "");
      std::printf("    odp per transport: rc %s, uc %s, ud %s\n",
                  TransportCaps(odp.per_transport_caps.rc_odp_caps).c_str(),
                  TransportCaps(odp.per_transport_caps.uc_odp_caps).c_str(),
                  TransportCaps(odp.per_transport_caps.ud_odp_caps).c_str());
    }
    // What a cache on this device would make of it (the verbs registrar's view).
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (pd != nullptr) {
      mrcache::Config probe = config;
      probe.odp = mrcache::OdpMode::kOff;  // build the registrar whatever odp asks
      auto registrar = mrcache::MakeVerbsRegistrar(pd, probe);
      if (registrar.ok()) {
        mrcache::OdpCapabilities caps = (*registrar)->odp_capabilities();
        std::printf("    mrcache: explicit ODP %s, implicit ODP %s, prefetch %s\n",
                    caps.explicit_odp ? "yes" : "no", caps.implicit_odp ? "yes" : "no",
                    caps.prefetch ? "yes" : "no");
        PrintLongestRegion((*registrar)->max_region_bytes(), config.max_region_bytes);
        auto mode = mrcache::ResolveOdpMode(config.odp, caps);
        if (mode.ok()) {
          std::printf("    odp=%s runs as: %s%s\n", OdpModeName(config.odp), OdpModeName(*mode),
                      *mode == mrcache::OdpMode::kOff
                          ? ""
                          : " (regions pin nothing: no pinned-memory budget applies)");
        } else {
          std::printf("    odp=%s: %s\n", OdpModeName(config.odp),
                      std::string(mode.status().message()).c_str());
        }
      } else {
        std::printf("    mrcache: %s\n", std::string(registrar.status().message()).c_str());
      }
      ibv_dealloc_pd(pd);
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
}

// Whether the registrar `config` names pins memory counted against
// RLIMIT_MEMLOCK (Registrar::pins_memory()), and its name. verbs, which needs
// a PD, always does; a registrar that cannot be built here is taken to pin.
std::pair<std::string, bool> RegistrarPins(const mrcache::Config& config) {
  if (config.registrar == "verbs") return {"verbs", true};
  auto registrar = mrcache::CreateRegistrar(config, nullptr);
  if (!registrar.ok()) return {config.registrar, true};
  return {(*registrar)->name(), (*registrar)->pins_memory()};
}

// The budget rule of pin_budget.h, applied to this process as it is now.
void PrintPinBudget(const mrcache::Config& config) {
  std::printf("\nPinned-memory budget (shared by the caches of a process):\n");
  const size_t limit = mrcache::MemlockLimitThatApplies();
  const size_t budget = mrcache::BudgetForLimit(limit == 0 ? RLIM_INFINITY : limit, limit != 0);
  const auto [registrar, pins] = RegistrarPins(config);
  std::printf("  registrar pins       : %s (registrar=%s)%s\n", pins ? "yes" : "no",
              registrar.c_str(),
              pins ? ", counted against RLIMIT_MEMLOCK"
                   : ": no budget applies, a cache's pin_budget_bytes is 0");
  std::printf(
      "  custom registrar     : %s (custom_pins=%d)\n",
      config.custom_pins ? "taken to pin, the budget applies" : "pins nothing, no budget applies",
      config.custom_pins ? 1 : 0);
  if (limit == 0) {
    std::printf("  RLIMIT_MEMLOCK       = does not apply (%s)\n",
                mrcache::PinsCountAgainstMemlock() ? "unlimited" : "CAP_IPC_LOCK");
    std::printf("  pin_budget_bytes     = 0 (no limit)\n");
  } else {
    std::printf("  RLIMIT_MEMLOCK       = %s (soft; counts: no CAP_IPC_LOCK)\n",
                mrcache::FormatSize(limit).c_str());
    std::printf(
        "  pin_budget_bytes     = %s (the limit minus %s of headroom for the "
        "application's own pins)%s\n",
        mrcache::FormatSize(budget).c_str(), mrcache::FormatSize(limit - budget).c_str(),
        pins ? "" : "; 0 with this registrar, which pins nothing");
  }
  if (config.max_bytes != 0 && (budget == 0 || config.max_bytes < budget)) {
    std::printf("  max_bytes            = %s lowers a cache's budget to it\n",
                mrcache::FormatSize(config.max_bytes).c_str());
  }
  std::printf("  odp                  = %s%s\n", OdpModeName(config.odp),
              config.odp == mrcache::OdpMode::kOff
                  ? ""
                  : " (on a device with ODP, regions pin nothing and need no budget)");
}

// The uffd monitor's watching: a probe on a fresh mapping, the map-count
// limit, and the stats that count what it could not watch.
void PrintUffdWatching() {
  auto lease = mrcache::AcquireMonitor(mrcache::MonitorRowOf(mrcache::MonitorId::kUffd).name);
  if (!lease.ok()) return;  // "unavailable" with its cause is printed above
  const size_t len = 4 * static_cast<size_t>(getpagesize());
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    (*lease)->Watch(p, len);
    const mrcache::WatchFailureCounts f = (*lease)->watch_failures();
    (*lease)->Unwatch(p, len);
    munmap(p, len);
    std::printf("  uffd watch probe (an anonymous mapping): %s\n",
                f.total == 0       ? "watched"
                : f.map_limit != 0 ? "not watched: map-count limit reached"
                : f.eperm != 0     ? "not watched: EPERM"
                : f.enomem != 0    ? "not watched: ENOMEM"
                                   : "not watched: see watch_* in mrc_stats_t");
  }
  const mrcache::uffd_monitor::MapCountInfo mc = mrcache::uffd_monitor::MapCount();
  std::printf(
      "  uffd registers whole mappings and adds none at or above %zu mappings "
      "(%d%% of vm.max_map_count %zu); this process has %zu\n",
      mc.limit, mrcache::uffd_monitor::kMapCountPercent, mc.max_map_count, mc.map_count);
  std::printf(
      "  ranges uffd cannot watch are counted per cache: mrc_stats_t.watch_failures "
      "(watch_enomem, watch_ebusy, watch_eperm, watch_einval, watch_map_limit, "
      "watch_other) and MRCACHE_STATS\n");
}

// Installs and releases `list` ("patch", "auto+uffd", ...) and prints
// whether it is available: for `auto` and lists, what it installed; for a
// monitor that may not be used alone, which monitors it needs beside it.
void PrintMonitorAvailability(const std::string& list, bool usable_alone) {
  const char* name = list.c_str();
  auto lease = mrcache::AcquireMonitor(list);
  if (!lease.ok()) {
    std::printf("  %-9s unavailable: %s\n", name, std::string(lease.status().message()).c_str());
    return;
  }
  if (!usable_alone) {
    std::printf("  %-9s installable, but only with %s (e.g. auto+%s below)\n", name,
                absl::StrReplaceAll(mrcache::MonitorsThatFence(), {{"`", ""}}).c_str(), name);
    return;
  }
  const mrcache::MonitorRow* row = mrcache::FindMonitor(list);
  const bool combined = row == nullptr || row->reports == mrcache::MonitorReports::kCombination;
  std::printf("  %-9s available%s%s\n", name, combined ? ": " : "",
              combined ? (*lease)->name().c_str() : "");
  if (!(*lease)->shortfall().empty()) {
    std::printf("  %-9s incomplete: %s\n", "", (*lease)->shortfall().c_str());
  }
}

// The monitor table (monitor_table.h), one monitor a line, tab-separated:
// name, when it reports (nothing, before, after, combination), "alone" or
// "only with" the monitors it needs beside it, and what it watches.
void PrintMonitorTable() {
  for (const mrcache::MonitorRow& row : mrcache::MonitorTable()) {
    const char* reports = row.reports == mrcache::MonitorReports::kNothing  ? "nothing"
                          : row.reports == mrcache::MonitorReports::kBefore ? "before"
                          : row.reports == mrcache::MonitorReports::kAfter  ? "after"
                                                                            : "combination";
    const std::string use =
        row.usable_alone
            ? "alone"
            : "only with " + absl::StrReplaceAll(mrcache::MonitorsThatFence(), {{"`", ""}});
    std::printf("%s\t%s\t%s\t%s\n", row.name, reports, use.c_str(), row.description);
  }
}

void PrintMonitors(const mrcache::Config& config) {
  std::printf("\nMemory monitors (installed and released again in this process):\n");
  for (const mrcache::MonitorRow& row : mrcache::MonitorTable()) {
    PrintMonitorAvailability(row.name, row.usable_alone);
  }
  // Each monitor that needs a companion, with auto.
  for (const mrcache::MonitorRow& row : mrcache::MonitorTable()) {
    if (!row.usable_alone) {
      PrintMonitorAvailability(
          std::string(mrcache::MonitorRowOf(mrcache::MonitorId::kAuto).name) + "+" + row.name,
          true);
    }
  }
  const std::string sanitizer = mrcache::SanitizerRuntime();
  if (sanitizer.empty()) {
    std::printf("  sanitizer runtime: none (auto adds uffd only where one is loaded)\n");
  } else {
    std::printf(
        "  sanitizer runtime: %s (auto adds uffd: its allocator unmaps with inline system "
        "calls that patch and symbols do not see)\n",
        sanitizer.c_str());
  }
  PrintUffdWatching();
  auto chosen = mrcache::AcquireMonitor(config.monitor);
  std::printf(
      "  monitor=%s gives: %s\n", config.monitor.c_str(),
      chosen.ok() ? (*chosen)->name().c_str() : std::string(chosen.status().message()).c_str());
  // What a cache created with this configuration reports as
  // mrc_stats_t.monitor_incomplete (auto unavailable altogether counts too).
  bool incomplete = chosen.ok() ? !(*chosen)->shortfall().empty() : config.monitor == "auto";
  std::printf("  monitor_incomplete: %d%s%s\n", incomplete ? 1 : 0,
              chosen.ok() && incomplete ? " -- " : "",
              chosen.ok() && incomplete ? (*chosen)->shortfall().c_str() : "");
}

// The configuration keys as the Markdown table of README.md ("Configuration").
void PrintConfigTable() {
  std::printf("| key | values | default |\n|---|---|---|\n");
  for (const mrcache::ConfigKeyInfo& key : mrcache::Config::KeyTable()) {
    std::printf("| `%s` | %s | %s |\n", key.name, key.values, key.default_value);
  }
}

// Markdown `code` and *emphasis* of the key table as roff bold and italics,
// with roff's escape character escaped.
std::string MarkdownToRoff(const char* text) {
  std::string out;
  bool code = false, emphasis = false;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == '`') {
      out += code ? "\\fR" : "\\fB";
      code = !code;
    } else if (*c == '*' && !code) {
      out += emphasis ? "\\fR" : "\\fI";
      emphasis = !emphasis;
    } else if (*c == '\\') {
      out += "\\e";
    } else {
      out += *c;
    }
  }
  return out;
}

// The configuration keys as the list of mrcache(7)'s CONFIGURATION section.
void PrintConfigMan() {
  for (const mrcache::ConfigKeyInfo& key : mrcache::Config::KeyTable()) {
    std::printf(".TP\n.B %s\n%s.\nDefault: %s.\n", key.name, MarkdownToRoff(key.values).c_str(),
                MarkdownToRoff(key.default_value).c_str());
  }
}

// The live-statistics options (--pid, --json, --watch, --count, --list,
// --prometheus).
struct LiveOptions {
  pid_t pid = 0;
  bool json = false, list = false, prometheus = false;
  double watch_seconds = 0;
  long count = 0;  // --watch refreshes; 0 = until the process ends
  bool requested() const { return pid != 0 || json || list || prometheus || watch_seconds > 0; }
  // Why these options do not go together, or "".
  std::string Conflict() const {
    if ((json || watch_seconds > 0) && pid == 0) return "--json and --watch need --pid PID";
    if (list && (pid != 0 || prometheus)) return "--list goes alone";
    if (json + prometheus + (watch_seconds > 0) > 1)
      return "choose one of --json, --prometheus and --watch";
    if (count != 0 && watch_seconds <= 0) return "--count needs --watch";
    return "";
  }
};

// Consumes argv[*i] (and its value) if it is a live-statistics option.
// Returns an error message, or "".
std::string ParseLiveOption(int argc, char** argv, int* i, LiveOptions* o) {
  const std::string arg = argv[*i];
  auto value = [&]() -> const char* { return *i + 1 < argc ? argv[++*i] : nullptr; };
  if (arg == "--json") {
    o->json = true;
  } else if (arg == "--list") {
    o->list = true;
  } else if (arg == "--prometheus") {
    o->prometheus = true;
  } else if (arg == "--pid" || arg == "--watch" || arg == "--count") {
    const char* v = value();
    if (v == nullptr) return arg + " needs a value";
    if (arg == "--watch") {
      if (!absl::SimpleAtod(v, &o->watch_seconds) || !(o->watch_seconds >= 0.01) ||
          o->watch_seconds > 86400) {
        return absl::StrCat("--watch '", v, "': expected seconds, from 0.01 to 86400");
      }
      return "";
    }
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n <= 0 || n > INT32_MAX) {
      return absl::StrCat(arg, " '", v, "': expected a positive whole number");
    }
    if (arg == "--pid") o->pid = static_cast<pid_t>(n);
    if (arg == "--count") o->count = static_cast<long>(n);
  } else {
    return absl::StrCat("unknown argument '", arg, "'");
  }
  return "";
}

uint64_t UnixNsNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

int LiveError(const absl::Status& status) {
  std::fprintf(stderr, "mrcache-info: %s\n", std::string(status.message()).c_str());
  return 1;
}

// --watch: rates per second between readings `seconds` apart.
int Watch(const LiveOptions& o) {
  absl::StatusOr<mrcache::ProcessSnapshot> before = mrcache::ReadStatsPage(o.pid);
  if (!before.ok()) return LiveError(before.status());
  std::printf("process %d (%s): rates per second every %.2f s\n", o.pid,
              mrcache_info::CommandOf(o.pid).c_str(), o.watch_seconds);
  std::fflush(stdout);
  for (long n = 0; o.count == 0 || n < o.count; ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(o.watch_seconds));
    absl::StatusOr<mrcache::ProcessSnapshot> now = mrcache::ReadStatsPage(o.pid);
    if (!now.ok() && mrcache::StatusToErrno(now.status()) == ENOENT) {
      std::printf("process %d no longer publishes (it ended or destroyed its caches)\n", o.pid);
      return 0;
    }
    if (!now.ok()) return LiveError(now.status());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s", mrcache_info::FormatRates(*before, *now, seconds).c_str());
    std::fflush(stdout);
    before = std::move(now);
  }
  return 0;
}

int RunLive(const LiveOptions& o) {
  if (o.watch_seconds > 0) return Watch(o);
  if (o.list) {
    mrcache_info::Listing listing = mrcache_info::ListLivePages();
    for (pid_t pid : listing.removed) {
      std::printf("removed the page of process %d, which is gone\n", pid);
    }
    std::printf("%-8s %-16s %6s %12s %12s %10s\n", "PID", "COMMAND", "CACHES", "HITS", "MISSES",
                "PINNED");
    for (const mrcache_info::ListedProcess& p : listing.live) {
      if (!p.snapshot.ok()) {
        std::printf("%-8d %-16s unreadable: %s\n", p.pid, mrcache_info::CommandOf(p.pid).c_str(),
                    std::string(p.snapshot.status().message()).c_str());
        continue;
      }
      uint64_t hits = 0, misses = 0, pinned = 0;
      for (const mrcache::CacheSnapshot& c : p.snapshot->caches) {
        hits += c.counters[mrcache::kStatHits];
        misses += c.counters[mrcache::kStatMisses];
        pinned += c.counters[mrcache::kStatPinnedBytes];
      }
      std::printf("%-8d %-16s %6zu %12llu %12llu %10s\n", p.pid,
                  mrcache_info::CommandOf(p.pid).c_str(), p.snapshot->caches.size(),
                  static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses),
                  mrcache_info::Size(pinned).c_str());
    }
    return 0;
  }
  if (o.prometheus && o.pid == 0) {
    std::vector<mrcache::ProcessSnapshot> all;
    for (mrcache_info::ListedProcess& p : mrcache_info::ListLivePages().live) {
      if (p.snapshot.ok()) all.push_back(std::move(*p.snapshot));
    }
    std::printf("%s", mrcache_info::FormatPrometheus(all).c_str());
    return 0;
  }
  absl::StatusOr<mrcache::ProcessSnapshot> snapshot = mrcache::ReadStatsPage(o.pid);
  if (!snapshot.ok()) return LiveError(snapshot.status());
  if (o.prometheus) {
    std::printf("%s", mrcache_info::FormatPrometheus({*snapshot}).c_str());
  } else if (o.json) {
    std::printf("%s", mrcache_info::FormatProcessJson(*snapshot).c_str());
  } else {
    std::printf("%s", mrcache_info::FormatProcessText(*snapshot, UnixNsNow()).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  LiveOptions live;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "-h") == 0 || std::strcmp(arg, "--help") == 0) {
      std::printf(
          "usage: mrcache-info [--config-table | --config-man | --monitors]\n"
          "       mrcache-info --pid PID [--json | --prometheus | --watch SECS [--count N]]\n"
          "       mrcache-info --list | --prometheus\n\n"
          "Prints the mrcache configuration in effect (every key; set them with MRCACHE_<KEY>),\n"
          "the RDMA devices libibverbs lists with their ODP capabilities, and which memory\n"
          "monitors can be installed here. Exit status 1 if the MRCACHE_* environment is\n"
          "invalid.\n\n"
          "--config-table  print every configuration key, what it accepts and its default,\n"
          "                as a Markdown table (the one in README.md), and exit.\n"
          "--config-man    the same keys as the roff list of mrcache(7), and exit.\n"
          "--monitors      every memory monitor, one a line (tab-separated): its name, when\n"
          "                it reports a release (nothing, before, after, combination),\n"
          "                whether it may be used alone, what it watches; and exit.\n\n"
          "Live statistics (caches publish them unless stats_shm=off; this user's processes):\n"
          "--pid PID       the caches of process PID: counters, pinned bytes against the pin\n"
          "                budget, the deregistration queue (async_dereg), histograms, and\n"
          "                each rail's registrations of a rails cache (refreshed for each\n"
          "                reading: the process's thread copies them when a reader asks,\n"
          "                and sleeps otherwise).\n"
          "--json          the same as one JSON object.\n"
          "--watch SECS    every SECS seconds, hits/s, misses/s and registrations/s per cache,\n"
          "                until the process ends (or N times with --count N).\n"
          "--list          the processes of this user that publish; removes the pages left\n"
          "                by processes that died.\n"
          "--prometheus    the Prometheus text exposition format (metrics mrcache_*, labels\n"
          "                pid, cache, rail; mrcache_rail_* also rail_index) of --pid PID,\n"
          "                or of every process --list shows.\n"
          "Exit status 1 if a page cannot be read (the message says why).\n");
      return 0;
    }
    if (std::strcmp(arg, "--config-table") == 0) {
      PrintConfigTable();
      return 0;
    }
    if (std::strcmp(arg, "--config-man") == 0) {
      PrintConfigMan();
      return 0;
    }
    if (std::strcmp(arg, "--monitors") == 0) {
      PrintMonitorTable();
      return 0;
    }
    const std::string error = ParseLiveOption(argc, argv, &i, &live);
    if (!error.empty()) {
      std::fprintf(stderr, "mrcache-info: %s (see --help)\n", error.c_str());
      return 2;
    }
  }
  if (live.requested()) {
    const std::string conflict = live.Conflict();
    if (!conflict.empty()) {
      std::fprintf(stderr, "mrcache-info: %s (see --help)\n", conflict.c_str());
      return 2;
    }
    return RunLive(live);
  }
  mrcache::Config config;
  bool ok = PrintConfig(&config);
  PrintDevices(config);
  PrintPinBudget(config);
  PrintMonitors(config);
  return ok ? 0 : 1;
}
