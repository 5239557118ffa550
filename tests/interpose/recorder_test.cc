// The MRCACHE_RECORD stream as the shim's recorder writes it: header and
// configuration first, one whole line per event, releases reported by the
// memory monitors, concurrent writers never interleaving, a forked child
// silent, and an uncreatable path reported without recording.
#include "interpose/recorder.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "interpose/record_format.h"
#include "interpose/shim_defaults.h"
#include "mrcache/monitors/memory_events.h"

namespace mrcache_preload {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", getpid());
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::string> lines = absl::StrSplit(text.str(), '\n', absl::SkipEmpty());
  return lines;
}

TEST(Recorder, WritesTheHeaderAndTheConfigurationFirst) {
  const std::string path = TempPath("header");
  mrcache::Config config = ShimDefaults();
  config.bridge_bytes = 0;
  auto recorder = Recorder::Open(path, config);
  ASSERT_NE(recorder, nullptr);
  std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "# mrcache-record 1");
  EXPECT_EQ(lines[1], RecordConfigLine(config));
  EXPECT_NE(lines[1].find(" bridge_bytes=0 "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(" remote_keys=private "), std::string::npos) << lines[1];
}

TEST(Recorder, RecordsRegistrationsWithIncreasingIdsAndTheirDeregistrations) {
  const std::string path = TempPath("events");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  const uint64_t a = recorder->Register(reinterpret_cast<void*>(0x7f00deadb000), 300000, 7);
  const uint64_t b = recorder->Register(reinterpret_cast<void*>(0x1000), 1, 1);
  recorder->Deregister(a);
  recorder->Deregister(0);  // not recorded: no ID
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[2], "reg 1 0x7f00deadb000 300000 7");
  EXPECT_EQ(lines[3], "reg 2 0x1000 1 1");
  EXPECT_EQ(lines[4], "dereg 1");
}

TEST(Recorder, RecordsReleasesTheMonitorsReport) {
  const std::string path = TempPath("release");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  mrcache::ReportMemoryRelease(reinterpret_cast<void*>(0x7f0000010000), 8192);
  std::vector<std::string> lines = Lines(path);
  ASSERT_GE(lines.size(), 3u);
  bool found = false;
  for (const std::string& line : lines) found |= line == "release 0x7f0000010000 8192";
  EXPECT_TRUE(found);
}

// What the getting thread releases inside a get comes after the get's reg
// line (the cache answered first); another thread's release does not wait.
TEST(Recorder, ReleasesInsideAGetFollowItsRegistration) {
  const std::string path = TempPath("inside_get");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  {
    Recorder::GetScope get(recorder.get());
    mrcache::ReportMemoryRelease(reinterpret_cast<void*>(0x7f0000020000), 4096);
    std::thread([] {
      mrcache::ReportMemoryRelease(reinterpret_cast<void*>(0x7f0000030000), 4096);
    }).join();
    recorder->Register(reinterpret_cast<void*>(0x7f0000040000), 4096, 1);
  }
  std::vector<std::string> events;
  for (const std::string& line : Lines(path)) {
    if (line.find("0x7f00000") != std::string::npos) events.push_back(line);
  }
  EXPECT_EQ(events,
            (std::vector<std::string>{"release 0x7f0000030000 4096", "reg 1 0x7f0000040000 4096 1",
                                      "release 0x7f0000020000 4096"}));
}

// A get given up without a registration still writes what it deferred.
TEST(Recorder, ReleasesInsideAFailedGetAreWrittenWhenItEnds) {
  const std::string path = TempPath("failed_get");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  {
    Recorder::GetScope get(recorder.get());
    for (int i = 0; i < Recorder::kMaxDeferred + 2; ++i) {
      mrcache::ReportMemoryRelease(reinterpret_cast<void*>(0x7f0000100000 + i * 4096), 4096);
    }
  }
  int releases = 0;
  for (const std::string& line : Lines(path)) releases += line.rfind("release 0x7f00001", 0) == 0;
  EXPECT_EQ(releases, Recorder::kMaxDeferred + 2);
}

TEST(Recorder, ConcurrentThreadsWriteWholeLines) {
  const std::string path = TempPath("threads");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder] {
      for (int i = 0; i < kEach; ++i)
        recorder->Deregister(recorder->Register(reinterpret_cast<void*>(0x1000), 4096, 1));
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::string> lines = Lines(path);
  int regs = 0, deregs = 0;
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ' ');
    if (f[0] == "reg") {
      ++regs;
      EXPECT_EQ(f.size(), 5u) << lines[i];
    } else if (f[0] == "dereg") {
      ++deregs;
      EXPECT_EQ(f.size(), 2u) << lines[i];
    }
  }
  EXPECT_EQ(regs, kThreads * kEach);
  EXPECT_EQ(deregs, kThreads * kEach);
}

TEST(Recorder, ForkedChildRecordsNothing) {
  const std::string path = TempPath("fork");
  auto recorder = Recorder::Open(path, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  const pid_t child = fork();  // fork_guard's atfork handlers call OnForkChild
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);
    const uint64_t id = recorder->Register(reinterpret_cast<void*>(0x1000), 4096, 1);
    _exit(id == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(Lines(path).size(), 2u);
  EXPECT_EQ(recorder->Register(reinterpret_cast<void*>(0x1000), 4096, 1),
            1u);  // the parent still records
}

TEST(Recorder, PercentPIsTheProcessId) {
  const std::string pattern = TempPath("pid") + ".%p";
  auto recorder = Recorder::Open(pattern, ShimDefaults());
  ASSERT_NE(recorder, nullptr);
  const std::string path = TempPath("pid") + "." + std::to_string(getpid());
  EXPECT_EQ(Lines(path).size(), 2u);
}

TEST(Recorder, UncreatablePathIsReportedAndNotRecorded) {
  testing::internal::CaptureStderr();
  auto recorder = Recorder::Open("/nonexistent/dir/trace", ShimDefaults());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(recorder, nullptr);
  EXPECT_EQ(
      err,
      "mrcache: MRCACHE_RECORD=/nonexistent/dir/trace: No such file or directory; not recording\n");
}

}  // namespace
}  // namespace mrcache_preload
