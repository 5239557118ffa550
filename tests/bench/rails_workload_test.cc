// mrbench --rails: the table it prints, and lazy registration's count
// against eager's on a registrar whose cost is per call (sim).
#include "bench/rails_workload.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/config.h"

namespace mrbench {
namespace {

// What RunRailsWorkload printed for `options`; empty if it failed.
std::string Printed(const RailsRunOptions& options) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return "";
  const absl::Status ran = RunRailsWorkload(options, out);
  std::fclose(out);
  std::string printed(text, size);
  std::free(text);
  EXPECT_TRUE(ran.ok()) << ran;
  return ran.ok() ? printed : "";
}

RailsRunOptions SmallSimRun() {
  RailsRunOptions o;
  o.base.registrar = "sim";
  o.base.stats_shm = false;
  o.rails = 4;
  o.transfers = 400;
  o.repeats = 1;
  return o;
}

// The numbers of the table's line that starts with `name`.
std::vector<double> Row(const std::string& printed, const std::string& name) {
  std::istringstream lines(printed);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, name.size() + 1, name + " ") != 0) continue;
    std::istringstream fields(line.substr(name.size()));
    std::vector<double> row;
    for (double v; fields >> v;) row.push_back(v);
    return row;
  }
  return {};
}

TEST(RailsWorkloadTest, TheTableHasRegistrationsRegistrarTotalWallAndCpuSeconds) {
  const std::string printed = Printed(SmallSimRun());
  EXPECT_NE(printed.find("registrations  registrar s      total s       wall s        cpu s"),
            std::string::npos)
      << printed;
  for (const char* name : {"mrcache", "eager", "ratio"}) {
    const std::vector<double> row = Row(printed, name);
    ASSERT_EQ(row.size(), 5u) << name << " in\n" << printed;
    for (double v : row) EXPECT_GT(v, 0) << name << " in\n" << printed;
  }
}

TEST(RailsWorkloadTest, LazyRegistrationMakesAtMostHalfOfEagersRegistrations) {
  const std::string printed = Printed(SmallSimRun());
  const std::vector<double> mrcache = Row(printed, "mrcache"), eager = Row(printed, "eager");
  ASSERT_EQ(mrcache.size(), 5u) << printed;
  ASSERT_EQ(eager.size(), 5u) << printed;
  EXPECT_LE(mrcache[0], eager[0] / 2) << printed;
}

TEST(RailsWorkloadTest, ProcessCpuSecondsCoverAtLeastTheTimeInTheCache) {
  // The replay's thread spends its total seconds in the cache, on a CPU
  // (sim's cost is a busy wait), so the process's CPU time is at least
  // most of it, whichever thread deregisters.
  const std::string printed = Printed(SmallSimRun());
  const std::vector<double> eager = Row(printed, "eager");
  ASSERT_EQ(eager.size(), 5u) << printed;
  EXPECT_GE(eager[4], eager[2] * 0.5) << printed;
}

TEST(RailsWorkloadTest, RailsOutsideOneToSixtyFourAreRefused) {
  RailsRunOptions o = SmallSimRun();
  o.rails = 0;
  EXPECT_FALSE(RunRailsWorkload(o, stdout).ok());
  o.rails = 65;
  EXPECT_FALSE(RunRailsWorkload(o, stdout).ok());
}

}  // namespace
}  // namespace mrbench
