// mrbench end to end: the binary run as a user runs it, on the sim registrar
// (and on uring with --verify where io_uring works).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mrcache/registrars/uring_registrar.h"

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `env`: VAR=value assignments for the run, or "".
Outcome RunMrbench(const std::string& args, const std::string& env = "") {
  Outcome out;
  FILE* p =
      popen((env + (env.empty() ? "" : " ") + "bench/mrbench " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.output.append(buf, n);
  const int status = pclose(p);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The string or number after "key": on `line` ("" if absent).
std::string Field(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\": ";
  size_t pos = line.find(tag);
  if (pos == std::string::npos) return "";
  pos += tag.size();
  if (line[pos] == '"') return line.substr(pos + 1, line.find('"', pos + 1) - pos - 1);
  return line.substr(pos, line.find_first_of(",}", pos) - pos);
}

struct Result {
  double hit_rate = -1;
  std::string stale;
};

// (workload, config) -> result, from mrbench's JSON (one object per line).
std::map<std::pair<std::string, std::string>, Result> ParseJson(const std::string& json) {
  std::map<std::pair<std::string, std::string>, Result> out;
  std::istringstream lines(json);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("\"config\"") == std::string::npos) continue;
    Result r;
    EXPECT_TRUE(absl::SimpleAtod(Field(line, "hit_rate"), &r.hit_rate)) << line;
    r.stale = Field(line, "stale");
    out[{Field(line, "workload"), Field(line, "config")}] = r;
  }
  return out;
}

TEST(Mrbench, SimRunOrdersHitRatesSanelyWithNoStaleRegistration) {
  const std::string json = ::testing::TempDir() + "/sim.json";
  Outcome o = RunMrbench("--registrar sim --verify --ops 3000 --max-regions 64 --json " + json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  auto results = ParseJson(ReadFile(json));
  for (const char* w : {"pingpong", "ring", "churn", "zipf", "kv"}) {
    for (const char* c : {"none", "mrcache", "mrcache-nomerge", "ucx", "belady-nomerge"}) {
      ASSERT_TRUE(results.count({w, c})) << w << " " << c << "\n" << o.output;
    }
    const auto at = [&](const char* c) { return results[{w, c}]; };
    EXPECT_EQ(at("none").hit_rate, 0) << w;
    EXPECT_GE(at("mrcache").hit_rate, at("none").hit_rate) << w;
    EXPECT_GT(at("mrcache").hit_rate, 0) << w;
    for (const char* c : {"none", "mrcache", "mrcache-nomerge", "ucx"}) {
      EXPECT_EQ(at(c).stale, "0") << w << " " << c;
    }
    EXPECT_EQ(at("belady-nomerge").stale, "null");
  }
  // Whole-buffer workloads: the offline optimum bounds every cache without merging.
  for (const char* w : {"pingpong", "zipf"}) {
    const double belady = results[{w, "belady-nomerge"}].hit_rate;
    const double nomerge = results[{w, "mrcache-nomerge"}].hit_rate;
    EXPECT_GE(belady, nomerge) << w;
  }
  EXPECT_NE(o.output.find("workload"), std::string::npos);  // the table's header
}

TEST(Mrbench, UringVerifiesEveryTransferAndFindsNothingStale) {
  Outcome o = RunMrbench(
      "--registrar uring --ops 2000 --workload churn,pingpong --configs none,mrcache,ucx");
  if (!mrcache::UringAvailable()) GTEST_SKIP() << "io_uring is not available here";
  EXPECT_NE(o.output.find("verify on"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("stale registration"), std::string::npos) << o.output;
  if (o.output.find("the caches' pin budget is") == std::string::npos) {
    ASSERT_EQ(o.exit_code, 0) << o.output;
    return;
  }
  // Unprivileged (RLIMIT_MEMLOCK applies): UCX has no pin budget of its own
  // and may fail at the limit, which its row reports; every other row runs.
  std::istringstream lines(o.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("FAILED") == std::string::npos) continue;
    EXPECT_NE(line.find(" ucx "), std::string::npos) << "only UCX may fail: " << line;
    EXPECT_NE(line.find("Cannot allocate memory"), std::string::npos) << line;
  }
}

TEST(Mrbench, EveryConfigurationReplaysOnTheSameHeapLayout) {
  // churn mallocs and frees buffers of every size: which of them share pages
  // (and so what a cache merges or reuses) depends on where malloc puts
  // them. The same configuration twice must find the same hits.
  const std::string json = ::testing::TempDir() + "/layout.json";
  Outcome o = RunMrbench(
      "--registrar sim --workload churn --ops 2000 --configs "
      "mrcache,mrcache-nomerge,mrcache,mrcache-nomerge --json " +
      json);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  std::istringstream lines(ReadFile(json));
  std::string line;
  std::map<std::string, std::vector<std::string>> by_config;  // hits, registrations
  while (std::getline(lines, line)) {
    if (line.find("\"config\"") == std::string::npos) continue;
    by_config[Field(line, "config")].push_back(
        absl::StrCat(Field(line, "hit_rate"), " ", Field(line, "registrations")));
  }
  for (const char* c : {"mrcache", "mrcache-nomerge"}) {
    ASSERT_EQ(by_config[c].size(), 2u) << c << "\n" << o.output;
    EXPECT_EQ(by_config[c][0], by_config[c][1]) << c;
  }
}

TEST(Mrbench, MemlockRunsUnprivilegedAndKeepsEveryConfigurationWithinThePinBudget) {
  // sim with sim_mlock=1 pins with mlock, which RLIMIT_MEMLOCK bounds per
  // process: 1 MiB leaves the caches (and belady-nomerge) a budget of 896 KiB.
  const std::string json = ::testing::TempDir() + "/memlock.json";
  Outcome o = RunMrbench(
      "--registrar sim --memlock 1M --ops 1500 --max-regions 64 --workload zipf,kv "
      "--configs none,mrcache,mrcache-nomerge,belady-nomerge --json " +
          json,
      "MRCACHE_SIM_MLOCK=1");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("the caches' pin budget is 896.0 KiB"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("total_s"), std::string::npos) << o.output;
  std::istringstream lines(ReadFile(json));
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.find("\"config\"") == std::string::npos) continue;
    ++rows;
    uint64_t peak = 0;
    ASSERT_TRUE(absl::SimpleAtoi(Field(line, "peak_pinned_bytes"), &peak)) << line;
    EXPECT_LE(peak, 896u << 10) << line;
    EXPECT_NE(Field(line, "total_seconds"), "") << line;
  }
  EXPECT_EQ(rows, 8);
}

TEST(Mrbench, MemlockGivesNoPinBudgetToARegistrarThatPinsNothing) {
  // sim without sim_mlock pins nothing (Registrar::pins_memory()): the limit
  // does not bind the caches, and belady-nomerge is not held to it either.
  Outcome o = RunMrbench(
      "--registrar sim --memlock 1M --ops 1500 --max-regions 64 --workload zipf "
      "--configs mrcache,belady-nomerge");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("registrar sim pins nothing, so the caches have no pin budget"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("the caches' pin budget is"), std::string::npos) << o.output;
}

TEST(Mrbench, MalformedTraceIsRejectedWithItsLineNumber) {
  const std::string trace = ::testing::TempDir() + "/bad_trace.txt";
  std::ofstream(trace) << "alloc 1 4096\nxfer 1 0 4096\nxfer 1 4000 200\n";
  Outcome o = RunMrbench("--registrar sim --trace " + trace);
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.output.find(trace + ":3: xfer [4000, 4200) is outside buffer 1 of 4096 bytes"),
            std::string::npos)
      << o.output;
  EXPECT_EQ(o.output.find("hit_rate"), std::string::npos);  // nothing replayed
}

TEST(Mrbench, TraceFileIsReplayed) {
  const std::string trace = ::testing::TempDir() + "/trace.txt";
  std::ofstream(trace)
      << "# two transfers of one buffer\nalloc 1 65536\nxfer 1 0 65536\nxfer 1 0 65536 1\nfree 1\n";
  Outcome o = RunMrbench("--registrar sim --configs none,mrcache --trace " + trace);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(trace), std::string::npos) << o.output;
}

// Two 1 MiB buffers transferred once each with room for one region: the
// second transfer evicts the first buffer's region, which async_dereg (every
// batch, async_dereg_bytes 0) hands to its background thread. (Frees release
// through mrc_invalidate, which deregisters on the caller.)
std::string BackgroundDeregistrations(const std::string& async_dereg) {
  const std::string trace = ::testing::TempDir() + "/evicted_buffer.txt";
  const std::string json = ::testing::TempDir() + "/evicted_buffer_" + async_dereg + ".json";
  std::ofstream(trace) << "alloc 1 1048576\nalloc 2 1048576\nxfer 1 0 1048576\n"
                          "xfer 2 0 1048576\nfree 1\nfree 2\n";
  Outcome o = RunMrbench("--registrar uring --configs mrcache-nomerge --max-regions 1 --trace " +
                             trace + " --json " + json,
                         "MRCACHE_ASYNC_DEREG_BYTES=0 MRCACHE_ASYNC_DEREG=" + async_dereg);
  EXPECT_EQ(o.exit_code, 0) << o.output;
  const std::string line = ReadFile(json);
  EXPECT_EQ(Field(line, "registrations"), "2") << line;
  EXPECT_NE(Field(line, "background_registrar_seconds"), "null") << line;
  return Field(line, "background_deregistrations");
}

TEST(Mrbench, BackgroundDeregistrationsAreReportedAndNoneWithoutAsyncDereg) {
  if (!mrcache::UringAvailable()) GTEST_SKIP() << "io_uring is not available here";
  EXPECT_EQ(BackgroundDeregistrations("off"), "0");
  // On, the background thread deregisters the buffer unless the cache's
  // destruction, which deregisters what is still queued itself, comes first.
  const std::string on = BackgroundDeregistrations("on");
  EXPECT_TRUE(on == "0" || on == "1") << on;
}

// A recording (mrcache-run --record): three registrations of one buffer, the
// last after a release of it.
const char kRecording[] =
    "# mrcache-record 1\n"
    "config max_regions=3 max_bytes=1M bridge_bytes=0 remote_keys=shared\n"
    "reg 1 0x7f0000010000 65536 1\ndereg 1\nreg 2 0x7f0000010000 65536 1\ndereg 2\n"
    "release 0x7f0000010000 65536\nreg 3 0x7f0000010000 65536 1\n";

TEST(Mrbench, RecordingIsReplayedWithItsLimits) {
  const std::string trace = ::testing::TempDir() + "/recording.trace";
  std::ofstream(trace) << kRecording;
  Outcome o = RunMrbench("--registrar sim --configs none,mrcache --trace " + trace);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("is a recording"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("max_regions 3, max_bytes 1.0 MiB"), std::string::npos) << o.output;
}

TEST(Mrbench, RecordingLimitsGiveWayToTheCommandLine) {
  const std::string trace = ::testing::TempDir() + "/recording2.trace";
  std::ofstream(trace) << kRecording;
  Outcome o = RunMrbench("--registrar sim --configs mrcache --max-regions 7 --trace " + trace);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("max_regions 7, max_bytes unlimited"), std::string::npos) << o.output;
}

TEST(Mrbench, RecordingReleaseMakesMrcacheRegisterAgain) {
  const std::string trace = ::testing::TempDir() + "/recording3.trace";
  const std::string json = ::testing::TempDir() + "/recording3.json";
  std::ofstream(trace) << kRecording;
  Outcome o = RunMrbench("--registrar sim --configs mrcache --json " + json + " --trace " + trace);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string out = ReadFile(json);
  EXPECT_EQ(Field(out, "transfers"), "3") << out;
  EXPECT_EQ(Field(out, "registrations"), "2") << out;  // the first, and the one after the release
}

// A recording made under remote_keys=private: ten requests with a remote
// right (REMOTE_READ) and ten local ones, each of one buffer.
std::string PrivateRecording() {
  std::string t = "# mrcache-record 1\nconfig remote_keys=private bridge_bytes=0\n";
  for (int i = 1; i <= 20; ++i) {
    absl::StrAppend(&t, "reg ", i, " 0x7f0000010000 65536 ", i % 2 ? 5 : 1, "\ndereg ", i, "\n");
  }
  return t;
}

TEST(Mrbench, PrivateRemoteKeysOfARecordingApplyToEveryConfiguration) {
  const std::string trace = ::testing::TempDir() + "/private.trace";
  const std::string json = ::testing::TempDir() + "/private.json";
  std::ofstream(trace) << PrivateRecording();
  Outcome o = RunMrbench("--registrar sim --configs mrcache,ucx,belady-nomerge --json " + json +
                         " --trace " + trace);
  EXPECT_NE(o.output.find("remote_keys private applies to every configuration: 10 of the 20 "
                          "registrations have a remote right"),
            std::string::npos)
      << o.output;
  auto results = ParseJson(ReadFile(json));
  auto hit_rate = [&results, &trace](const char* config) {
    return results[std::make_pair(trace, std::string(config))].hit_rate;
  };
  // The ten local requests share one registration (9 hits); the ten remote
  // ones get a registration each, in every configuration.
  EXPECT_DOUBLE_EQ(hit_rate("mrcache"), 0.45) << o.output;
  EXPECT_DOUBLE_EQ(hit_rate("belady-nomerge"), 0.45) << o.output;
  // UCX may be unavailable (its row then says FAILED).
  if (o.output.find("FAILED") == std::string::npos) {
    EXPECT_DOUBLE_EQ(hit_rate("ucx"), 0.45) << o.output;
  }
}

TEST(Mrbench, HeaderOfATraceFileStatesItsTransfersNotTheWorkloadParameters) {
  const std::string trace = ::testing::TempDir() + "/header.txt";
  std::ofstream(trace) << "alloc 1 65536\nxfer 1 0 65536\nxfer 1 0 4096\nxfer 1 0 65536\nfree 1\n";
  Outcome o = RunMrbench("--registrar sim --configs none --trace " + trace);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("trace " + trace + " (3 transfers)"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("seed"), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("per workload"), std::string::npos) << o.output;
}

TEST(Mrbench, HeaderOfWorkloadsStatesSeedAndTransfersGenerated) {
  Outcome o = RunMrbench("--registrar sim --configs none --workload pingpong --ops 500 --seed 7");
  ASSERT_EQ(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find("seed 7, 500 transfers per workload"), std::string::npos) << o.output;
}

TEST(Mrbench, HelpAndBadFlags) {
  Outcome help = RunMrbench("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"--registrar", "--workload", "--trace", "--seed", "--ops", "--max-regions", "--max-bytes",
        "--memlock", "--verify", "--json", "--plot", "--sweep"}) {
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
  }
  Outcome bad = RunMrbench("--bogus");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("unknown flag '--bogus'"), std::string::npos);
  Outcome workload = RunMrbench("--workload nope");
  EXPECT_EQ(workload.exit_code, 2);
  EXPECT_NE(workload.output.find("unknown name 'nope'"), std::string::npos);
}

TEST(Mrbench, UnusableRegistrarFailsBeforeRunning) {
  // No RDMA device on the test machines; where there is one, verbs works.
  Outcome o = RunMrbench("--registrar verbs --workload pingpong --ops 10");
  if (o.exit_code == 0) GTEST_SKIP() << "an RDMA device is present";
  EXPECT_EQ(o.exit_code, 2) << o.output;
  EXPECT_NE(o.output.find("mrbench: registrar verbs: "), std::string::npos) << o.output;
  EXPECT_EQ(o.output.find("hit_rate"), std::string::npos);
}

TEST(Mrbench, PlotWithSweepWritesAnSvg) {
  const std::string svg = ::testing::TempDir() + "/mrbench.svg";
  // `optimal`, belady-nomerge's former name, is still accepted.
  Outcome o = RunMrbench(
      "--registrar sim --ops 500 --max-regions 16 --workload zipf --configs mrcache,optimal "
      "--sweep --plot " +
      svg);
  ASSERT_EQ(o.exit_code, 0) << o.output;
  const std::string text = ReadFile(svg);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("hit rate vs capacity: zipf"), std::string::npos);
}

}  // namespace
