// mrbench: replays workloads through several registration-cache
// configurations on one registrar and reports hit rate, registrations,
// registrar time, pinned memory, cache overhead and stale registrations.
// Run `mrbench --help` for the flags; with no arguments it runs every
// built-in workload through every configuration on the uring registrar.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_registrar.h"
#include "bench/configs.h"
#include "bench/plot.h"
#include "bench/private_remote_keys.h"
#include "bench/rails_workload.h"
#include "bench/report.h"
#include "bench/trace.h"
#include "bench/workloads.h"
#include "mrcache/config.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrbench {
namespace {

constexpr char kUsage[] = R"(usage: mrbench [flags]

Replays a workload through cache configurations on one registrar and reports,
per configuration: transfers, hit rate, registrations, bytes registered,
registrar time, peak pinned bytes, ns per operation (cache overhead without
registrar time) and stale registrations found by --verify.

  --registrar NAME     sim | uring | verbs (default uring)
  --workload LIST      comma-separated built-in workloads (default: all):
                       pingpong, ring, churn, zipf, kv
  --trace FILE         replay a trace file instead (lines: alloc ID BYTES |
                       free ID | xfer ID OFFSET LENGTH [ACCESS]; # comments),
                       or a recording of an application (mrcache-run --record
                       FILE -- CMD), replayed in its recorded address layout with
                       its recorded configuration (see mrbench(1))
  --seed N             workload seed (default 1)
  --ops N              transfers per workload (default 20000)
  --max-regions N      cache limit on regions, all configurations (default 256; 0 = unlimited)
  --max-bytes SIZE     cache limit on pinned bytes, e.g. 64M (default 0 = unlimited)
  --memlock SIZE       run as an unprivileged process would: drop CAP_IPC_LOCK and set
                       RLIMIT_MEMLOCK (soft and hard) to SIZE, e.g. 8M, before anything
                       runs; `belady-nomerge` then keeps within the caches' pin budget,
                       and `ucx` gets it as its max_size
  --configs LIST       comma-separated subset of: none, mrcache, mrcache-nomerge, ucx,
                       belady-nomerge (Belady's MIN for a cache that never merges; `optimal`
                       is accepted for it)
  --verify, --no-verify
                       device-write through every registration and check the CPU
                       sees it (default: on for uring, off otherwise)
  --json PATH          also write the results as a JSON array
  --plot PATH.svg      draw hit rate and registrar time (and the sweep) with gnuplot
  --sweep              also run each workload at max_regions x 1/8 .. x4
  --save-trace PATH    write the (first) workload's trace in the text format and exit
  --rails N            instead of the above, run the rails workload over N rails
                       (1..64; one registrar each; verbs needs N devices, e.g.
                       softverbs with SOFTVERBS_DEVICES=N): each buffer sent to one or
                       two destinations, each transfer on the rail of its destination,
                       through mrcache (lazy per rail) and `eager` (every region on every
                       rail, as a registrar callback over all NICs); reports
                       registrations, registrar seconds, total seconds in the cache's
                       calls, wall seconds of the whole replay and the process's CPU
                       seconds over it, every thread's (medians of --repeats runs,
                       default 5)
  --repeats N          runs of each configuration of --rails (default 5)
  --help               this text

MRCACHE_* environment variables (e.g. MRCACHE_SIM_BASE_NS) configure the registrar.
)";

struct Flags {
  std::string registrar = "uring";
  std::vector<std::string> workloads = WorkloadNames();
  std::string trace_file;
  WorkloadParams params;
  std::vector<std::string> configs = ConfigNames();
  int verify = -1;  // -1: default for the registrar
  std::string json, plot, save_trace;
  bool sweep = false;
  uint64_t max_bytes = 0;
  bool limits_given = false;  // --max-regions or --max-bytes
  uint64_t memlock = 0;       // 0: run with the limits and capabilities inherited
  uint64_t rails = 0;         // --rails N: the rails workload instead of the configurations
  uint64_t repeats = 5;       // runs of each configuration of the rails workload
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "mrbench: %s\n", message.c_str());
  return 2;
}

bool InList(const std::vector<std::string>& list, const std::string& name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

// What the run replays, as the header states it: the trace file and its
// transfers (a recording's registrations), or the workloads' seed and
// transfers per workload as generated.
std::string RunSource(const Flags& flags, const std::vector<Trace>& traces) {
  if (!flags.trace_file.empty()) {
    return absl::StrFormat("trace %s (%zu %s)", flags.trace_file, traces[0].transfers(),
                           traces[0].recorded() ? "registrations, recorded" : "transfers");
  }
  bool same = true;
  for (const Trace& t : traces) same &= t.transfers() == traces[0].transfers();
  if (same) {
    return absl::StrFormat("seed %u, %zu transfers per workload", flags.params.seed,
                           traces[0].transfers());
  }
  std::string counts;
  for (const Trace& t : traces) {
    absl::StrAppend(&counts, counts.empty() ? "" : ", ", t.name, " ", t.transfers());
  }
  return absl::StrFormat("seed %u, transfers per workload: %s", flags.params.seed, counts);
}

// How a recording's remote_keys mode applies to the configurations compared
// (private_remote_keys.h), as a header line.
std::string RemoteKeysRule(const Trace& trace) {
  if (!RecordedWithPrivateRemoteKeys(trace)) {
    return "mrbench: remote_keys shared: every configuration may cache requests with remote "
           "rights\n";
  }
  return absl::StrFormat(
      "mrbench: remote_keys private applies to every configuration: %u of the %zu registrations "
      "have a remote right, and each gets a registration of its own (as under the shim) that no "
      "configuration can hit\n",
      RemoteRightAccesses(trace), trace.transfers());
}

// Parses argv into `flags`; returns an error message, or "" on success.
std::string ParseFlags(int argc, char** argv, Flags* flags, bool* help) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1), arg = arg.substr(0, eq), has_value = true;
    }
    auto next = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    auto number = [&](uint64_t* out) -> std::string {
      if (!next()) return arg + " needs a value";
      if (!absl::SimpleAtoi(value, out))
        return absl::StrCat(arg, ": '", value, "' is not a non-negative integer");
      return "";
    };
    auto list = [&](std::vector<std::string>* out,
                    const std::vector<std::string>& known) -> std::string {
      if (!next()) return arg + " needs a value";
      out->clear();
      for (absl::string_view given : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        const std::string name = CanonicalConfigName(given);
        if (!InList(known, name)) {
          return absl::StrCat(arg, ": unknown name '", given,
                              "' (known: ", absl::StrJoin(known, ", "), ")");
        }
        out->push_back(name);
      }
      if (out->empty()) return arg + " needs at least one name";
      return "";
    };
    std::string error;
    uint64_t n = 0;
    if (arg == "--help" || arg == "-h") {
      *help = true;
    } else if (arg == "--registrar") {
      if (!next()) return "--registrar needs a value";
      if (value != "sim" && value != "uring" && value != "verbs") {
        return absl::StrCat("--registrar: unknown registrar '", value,
                            "' (known: sim, uring, verbs)");
      }
      flags->registrar = value;
    } else if (arg == "--workload") {
      error = list(&flags->workloads, WorkloadNames());
    } else if (arg == "--configs") {
      error = list(&flags->configs, ConfigNames());
    } else if (arg == "--trace") {
      if (!next()) return "--trace needs a file";
      flags->trace_file = value;
    } else if (arg == "--seed") {
      error = number(&flags->params.seed);
    } else if (arg == "--ops") {
      if ((error = number(&n)).empty() && n == 0) error = "--ops must be at least 1";
      flags->params.ops = n;
    } else if (arg == "--max-regions") {
      flags->limits_given = true;
      error = number(&n);
      flags->params.max_regions = n;
    } else if (arg == "--max-bytes") {
      flags->limits_given = true;
      if (!next()) return "--max-bytes needs a value";
      absl::StatusOr<uint64_t> size = mrcache::ParseSize(value);
      if (!size.ok())
        return absl::StrCat("--max-bytes: '", value, "' is not a size (e.g. 4096, 64M, 1G)");
      flags->max_bytes = flags->params.max_bytes = *size;
    } else if (arg == "--memlock") {
      if (!next()) return "--memlock needs a value";
      absl::StatusOr<uint64_t> size = mrcache::ParseSize(value);
      if (!size.ok() || *size == 0)
        return absl::StrCat("--memlock: '", value, "' is not a positive size (e.g. 8M)");
      flags->memlock = *size;
    } else if (arg == "--verify" || arg == "--no-verify") {
      flags->verify = arg == "--verify";
    } else if (arg == "--json" || arg == "--plot" || arg == "--save-trace") {
      if (!next() || value.empty()) return arg + " needs a path";
      (arg == "--json" ? flags->json : arg == "--plot" ? flags->plot : flags->save_trace) = value;
    } else if (arg == "--rails") {
      if ((error = number(&flags->rails)).empty() && (flags->rails < 1 || flags->rails > 64)) {
        error = "--rails must be between 1 and 64";
      }
    } else if (arg == "--repeats") {
      if ((error = number(&flags->repeats)).empty() && flags->repeats == 0) {
        error = "--repeats must be at least 1";
      }
    } else if (arg == "--sweep") {
      flags->sweep = true;
    } else {
      return absl::StrCat("unknown flag '", argv[i], "' (see --help)");
    }
    if (!error.empty()) return error;
  }
  return "";
}

// Drops CAP_IPC_LOCK (effective, permitted, inheritable, ambient and, where
// allowed, the bounding set) and sets RLIMIT_MEMLOCK to `bytes`: from then on
// this process and its children (the ucx peer) pin as an unprivileged one.
std::string BecomeUnprivileged(uint64_t bytes) {
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_IPC_LOCK, 0, 0);
  prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0);  // EPERM without CAP_SETPCAP: the rest suffices
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0)
    return absl::StrCat("capget: ", std::strerror(errno));
  const uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
  data[CAP_IPC_LOCK / 32].effective &= ~bit;
  data[CAP_IPC_LOCK / 32].permitted &= ~bit;
  data[CAP_IPC_LOCK / 32].inheritable &= ~bit;
  if (syscall(SYS_capset, &header, data) != 0)
    return absl::StrCat("capset: ", std::strerror(errno));
  rlimit limit{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    return absl::StrCat("setrlimit(RLIMIT_MEMLOCK, ", bytes, "): ", std::strerror(errno));
  }
  return "";
}

bool GnuplotOnPath() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    if (access(absl::StrCat(dir, "/gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

int Main(int argc, char** argv) {
  Flags flags;
  bool help = false;
  const std::string error = ParseFlags(argc, argv, &flags, &help);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!error.empty()) return Fail(error);
  if (flags.memlock != 0) {
    const std::string dropped = BecomeUnprivileged(flags.memlock);
    if (!dropped.empty()) return Fail(absl::StrCat("--memlock: ", dropped));
  }
  if (flags.rails != 0) {
    absl::StatusOr<mrcache::Config> base = mrcache::Config::FromEnvironment();
    if (!base.ok()) return Fail(std::string(base.status().message()));
    RailsRunOptions rails;
    rails.base = *base;
    rails.base.registrar = flags.registrar;
    rails.base.max_regions = flags.params.max_regions;
    rails.base.max_bytes = flags.max_bytes;
    rails.rails = static_cast<int>(flags.rails);
    rails.seed = flags.params.seed;
    rails.transfers = flags.params.ops;
    rails.repeats = static_cast<int>(flags.repeats);
    absl::Status ran = RunRailsWorkload(rails, stdout);
    return ran.ok() ? 0 : Fail(std::string(ran.message()));
  }
  if (!flags.plot.empty() && !GnuplotOnPath()) {
    return Fail(
        "--plot needs gnuplot, which is not on PATH (install it: apt-get install gnuplot-nox)");
  }

  std::vector<Trace> traces;
  if (!flags.trace_file.empty()) {
    absl::StatusOr<Trace> trace = ReadTraceFile(flags.trace_file);
    if (!trace.ok()) return Fail(std::string(trace.status().message()));
    traces.push_back(std::move(*trace));
  } else {
    for (const std::string& name : flags.workloads) {
      absl::StatusOr<Trace> trace = MakeWorkload(name, flags.params);
      if (!trace.ok()) return Fail(std::string(trace.status().message()));
      traces.push_back(std::move(*trace));
    }
  }
  if (!flags.save_trace.empty()) {
    FILE* out = std::fopen(flags.save_trace.c_str(), "w");
    if (out == nullptr) return Fail(absl::StrCat("cannot write ", flags.save_trace));
    const std::string text = FormatTrace(traces[0]);
    const bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
    if (std::fclose(out) != 0 || !ok) return Fail(absl::StrCat("error writing ", flags.save_trace));
    return 0;
  }

  absl::StatusOr<mrcache::Config> base = mrcache::Config::FromEnvironment();
  if (!base.ok()) return Fail(std::string(base.status().message()));
  BenchOptions options;
  options.base = *base;
  options.base.registrar = flags.registrar;
  options.max_regions = flags.params.max_regions;
  options.max_bytes = flags.max_bytes;
  options.verify = flags.verify < 0 ? flags.registrar == "uring" : flags.verify == 1;
  if (traces[0].recorded()) {
    const mrcache::Config& recorded = traces[0].recorded_config;
    if (!flags.limits_given) {
      options.max_regions = flags.params.max_regions = recorded.max_regions;
      options.max_bytes = recorded.max_bytes;
    }
    std::printf(
        "mrbench: %s is a recording: mrcache replays with its max_merge_bytes %zu, bridge_bytes "
        "%zu, "
        "alignment %zu, remote_keys %s%s; the registrar, monitor and odp are mrbench's\n",
        traces[0].name.c_str(), recorded.max_merge_bytes, recorded.bridge_bytes, recorded.alignment,
        mrcache::RemoteKeysName(recorded.remote_keys),
        flags.limits_given ? "" : ", max_regions and max_bytes");
    std::printf("%s", RemoteKeysRule(traces[0]).c_str());
  }
  // The budget each cache works out at creation (pin_budget.h), if its
  // registrar pins at all (Registrar::pins_memory()).
  const size_t memlock_limit = mrcache::MemlockLimitThatApplies();
  options.pin_budget = memlock_limit != 0 ? mrcache::BudgetForLimit(memlock_limit, true) : 0;
  bool registrar_pins = true;
  {
    // Fail before running anything if the registrar cannot work here.
    absl::StatusOr<std::unique_ptr<mrcache::Registrar>> probe = MakeBenchRegistrar(options.base);
    if (!probe.ok())
      return Fail(absl::StrCat("registrar ", flags.registrar, ": ", probe.status().message()));
    registrar_pins = (*probe)->pins_memory();
    if (!registrar_pins) options.pin_budget = 0;
  }

  std::printf("mrbench: registrar %s, %s, max_regions %zu, max_bytes %s, verify %s\n",
              flags.registrar.c_str(), RunSource(flags, traces).c_str(), options.max_regions,
              options.max_bytes ? HumanBytes(options.max_bytes).c_str() : "unlimited",
              options.verify ? "on" : "off");
  if ((flags.memlock != 0 || options.pin_budget != 0) && registrar_pins) {
    std::printf(
        "mrbench: RLIMIT_MEMLOCK %s, CAP_IPC_LOCK %s: the caches' pin budget is %s; belady-nomerge "
        "keeps within it and ucx gets it as its max_size\n",
        HumanBytes(memlock_limit).c_str(), mrcache::PinsCountAgainstMemlock() ? "dropped" : "held",
        HumanBytes(options.pin_budget).c_str());
  } else if (memlock_limit != 0) {
    std::printf(
        "mrbench: RLIMIT_MEMLOCK %s, CAP_IPC_LOCK %s: registrar %s pins nothing, so the caches "
        "have no pin budget\n",
        HumanBytes(memlock_limit).c_str(), mrcache::PinsCountAgainstMemlock() ? "dropped" : "held",
        flags.registrar.c_str());
  }
  std::fflush(stdout);
  // Every run in a child forked from this process (RunConfigInChild), with
  // every row allocated (its error text's room included) before the first:
  // each configuration replays on the same heap layout.
  struct Run {
    const Trace* trace;
    BenchOptions options;
    bool sweep;    // a row of `sweep`, else of `rows`
    size_t index;  // in that vector
  };
  std::vector<Row> rows, sweep;
  std::vector<Run> runs;
  auto add = [&runs](std::vector<Row>* to, bool is_sweep, const Trace& trace,
                     const BenchOptions& at, const std::string& config) {
    Row row;
    row.config = config;
    row.workload = trace.name;
    row.max_regions = at.max_regions;
    row.error.reserve(kRowErrorCapacity);
    to->push_back(std::move(row));
    runs.push_back(Run{&trace, at, is_sweep, to->size() - 1});
  };
  for (const Trace& trace : traces) {
    for (const std::string& config : flags.configs) add(&rows, false, trace, options, config);
  }
  if (flags.sweep) {
    const size_t base_regions = options.max_regions ? options.max_regions : 256;
    for (const Trace& trace : traces) {
      for (size_t cap = std::max<size_t>(1, base_regions / 8); cap <= base_regions * 4; cap *= 2) {
        BenchOptions at = options;
        at.max_regions = cap;
        for (const std::string& config : flags.configs) {
          if (config != "none") add(&sweep, true, trace, at, config);
        }
      }
    }
  }
  for (const Run& run : runs) {
    RunConfigInChild(*run.trace, run.options, run.sweep ? &sweep[run.index] : &rows[run.index]);
  }
  PrintTable(rows, stdout);
  if (!sweep.empty()) {
    std::printf("\nsweep (hit rate versus max_regions):\n");
    PrintTable(sweep, stdout);
  }
  std::fflush(stdout);

  int status = 0;
  uint64_t stale = 0;
  for (const std::vector<Row>* set : {&rows, &sweep}) {
    for (const Row& r : *set) {
      if (!r.error.empty()) status = 1;
      stale += r.stale;
    }
  }
  if (!flags.json.empty()) {
    std::vector<Row> all = rows;
    all.insert(all.end(), sweep.begin(), sweep.end());
    absl::Status written = WriteJson(flags.json, all);
    if (!written.ok()) return Fail(std::string(written.message()));
  }
  if (!flags.plot.empty()) {
    absl::Status plotted = PlotSvg(rows, sweep, flags.plot);
    if (!plotted.ok()) return Fail(std::string(plotted.message()));
  }
  if (stale != 0) {
    std::fprintf(stderr, "mrbench: %llu stale registration(s) detected\n",
                 static_cast<unsigned long long>(stale));
    status = 1;
  }
  if (status != 0 && stale == 0)
    std::fprintf(stderr, "mrbench: some configurations failed (see the table)\n");
  return status;
}

}  // namespace
}  // namespace mrbench

int main(int argc, char** argv) { return mrbench::Main(argc, argv); }
