#include "bench/configs.h"

#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "bench/belady.h"
#include "bench/bench_registrar.h"
#include "bench/child_run.h"
#include "bench/counting_registrar.h"
#include "bench/mrcache_driver.h"
#include "bench/none_driver.h"
#include "bench/progress.h"
#include "bench/replay.h"
#include "bench/ucx_peer.h"

namespace mrbench {
namespace {

mrcache::Config LimitedConfig(const BenchOptions& options, const Trace& trace) {
  mrcache::Config config = options.base;
  if (trace.recorded()) ApplyRecordedConfig(trace.recorded_config, &config);
  config.max_regions = options.max_regions;
  config.max_bytes = options.max_bytes;
  return config;
}

void Fill(const ReplayResult& r, bool verified, Row* row) {
  row->transfers = r.transfers;
  row->hits = r.hits;
  row->registrations = r.registrations;
  row->registered_bytes = r.registered_bytes;
  row->registrar_seconds = double(r.registrar_ns) / 1e9;
  row->background_deregistrations = r.background_deregistrations;
  row->background_registrar_seconds = double(r.background_registrar_ns) / 1e9;
  row->peak_pinned_bytes = r.peak_pinned_bytes;
  row->ns_per_op = r.transfers ? double(r.cache_ns) / double(r.transfers) : 0;
  row->stale = r.stale;
  row->verified = verified;
}

absl::StatusOr<ReplayResult> RunInProcess(const std::string& name, const Trace& trace,
                                          const BenchOptions& options,
                                          const ReplayOptions& replay) {
  mrcache::Config config = LimitedConfig(options, trace);
  absl::StatusOr<std::unique_ptr<mrcache::Registrar>> inner = MakeBenchRegistrar(config);
  if (!inner.ok()) return inner.status();
  auto counters = std::make_shared<RegistrarCounters>();
  auto registrar = std::make_unique<CountingRegistrar>(std::move(*inner), counters);
  if (name == "none") {
    NoneDriver driver(*registrar);
    return Replay(trace, driver, *counters, replay);
  }
  if (name == "mrcache-nomerge") config.max_merge_bytes = 0;
  absl::StatusOr<std::unique_ptr<MrcacheDriver>> driver =
      MrcacheDriver::Create(config, std::move(registrar));
  if (!driver.ok()) return driver.status();
  return Replay(trace, **driver, *counters, replay);
}

}  // namespace

void ApplyRecordedConfig(const mrcache::Config& recorded, mrcache::Config* config) {
  config->max_merge_bytes = recorded.max_merge_bytes;
  config->bridge_bytes = recorded.bridge_bytes;
  config->alignment = recorded.alignment;
  config->remote_keys = recorded.remote_keys;
}

std::string CanonicalConfigName(absl::string_view name) {
  if (name == "optimal") return "belady-nomerge";
  return std::string(name);
}

const std::vector<std::string>& ConfigNames() {
  static const auto* names =
      new std::vector<std::string>{"none", "mrcache", "mrcache-nomerge", "ucx", "belady-nomerge"};
  return *names;
}

Row RunConfig(const std::string& name, const Trace& trace, const BenchOptions& options) {
  Row row;
  row.config = name;
  row.workload = trace.name;
  row.max_regions = options.max_regions;
  // The peers that have no pin budget of their own (the optimum, UCX's
  // max_size) keep within the caches' one.
  size_t budgeted_bytes = options.max_bytes;
  if (options.pin_budget != 0 && (budgeted_bytes == 0 || options.pin_budget < budgeted_bytes))
    budgeted_bytes = options.pin_budget;
  if (name == "belady-nomerge") {
    const OptimalResult r = OptimalHits(TraceEvents(trace), options.max_regions, budgeted_bytes);
    row.timed = false;
    row.transfers = r.accesses;
    row.hits = r.hits;
    row.registrations = r.registrations;
    row.registered_bytes = r.registered_bytes;
    row.peak_pinned_bytes = r.peak_pinned_bytes;
    return row;
  }
  Progress progress(absl::StrCat(trace.name, " ", name));
  ReplayOptions replay;
  replay.verify = options.verify;
  replay.progress = [&progress](size_t done, size_t total) { progress.Update(done, total); };
  absl::StatusOr<ReplayResult> result;
  if (name == "ucx") {
    UcxPeerSpec spec;
    spec.make_registrar = [&options, &trace] {
      return MakeBenchRegistrar(LimitedConfig(options, trace));
    };
    spec.max_regions = options.max_regions;
    spec.max_bytes = budgeted_bytes;
    spec.options = replay;
    result = RunUcxPeer(trace, spec);
  } else if (name == "none" || name == "mrcache" || name == "mrcache-nomerge") {
    result = RunInProcess(name, trace, options, replay);
  } else {
    result = absl::InvalidArgumentError(absl::StrCat("unknown configuration '", name, "'"));
  }
  progress.Done();
  if (!result.ok()) {
    row.error = std::string(result.status().message());
    return row;
  }
  Fill(*result, options.verify, &row);
  return row;
}

namespace {

// A Row's results as bytes (the child is the same binary as the parent).
struct RowMessage {
  uint64_t transfers = 0, hits = 0, registrations = 0, registered_bytes = 0, peak_pinned_bytes = 0,
           stale = 0, background_deregistrations = 0;
  double registrar_seconds = 0, background_registrar_seconds = 0, ns_per_op = 0;
  bool timed = true, verified = false;
  char error[kRowErrorCapacity] = {};
};
static_assert(std::is_trivially_copyable<RowMessage>::value, "sent through a pipe as bytes");

struct ChildJob {
  const Trace* trace;
  const BenchOptions* options;
  const std::string* config;
};

void RunConfigIntoMessage(void* context, void* buffer) {
  const ChildJob& job = *static_cast<ChildJob*>(context);
  RowMessage& m = *static_cast<RowMessage*>(buffer);
  const Row row = RunConfig(*job.config, *job.trace, *job.options);
  m.transfers = row.transfers;
  m.hits = row.hits;
  m.registrations = row.registrations;
  m.registered_bytes = row.registered_bytes;
  m.peak_pinned_bytes = row.peak_pinned_bytes;
  m.stale = row.stale;
  m.registrar_seconds = row.registrar_seconds;
  m.background_deregistrations = row.background_deregistrations;
  m.background_registrar_seconds = row.background_registrar_seconds;
  m.ns_per_op = row.ns_per_op;
  m.timed = row.timed;
  m.verified = row.verified;
  std::snprintf(m.error, sizeof m.error, "%s", row.error.c_str());
}

}  // namespace

void RunConfigInChild(const Trace& trace, const BenchOptions& options, Row* row) {
  ChildJob job{&trace, &options, &row->config};
  RowMessage m;
  absl::Status ran = RunInChild(row->config, &RunConfigIntoMessage, &job, &m, sizeof m);
  if (!ran.ok()) {
    row->error.assign(ran.message().data(), ran.message().size());
    return;
  }
  row->transfers = m.transfers;
  row->hits = m.hits;
  row->registrations = m.registrations;
  row->registered_bytes = m.registered_bytes;
  row->peak_pinned_bytes = m.peak_pinned_bytes;
  row->stale = m.stale;
  row->registrar_seconds = m.registrar_seconds;
  row->background_deregistrations = m.background_deregistrations;
  row->background_registrar_seconds = m.background_registrar_seconds;
  row->ns_per_op = m.ns_per_op;
  row->timed = m.timed;
  row->verified = m.verified;
  if (m.error[0] != '\0') row->error.assign(m.error);  // within its reserved capacity
}

}  // namespace mrbench
