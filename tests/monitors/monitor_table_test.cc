// The one table of monitors (mrcache/monitors/monitor_table.h) and what
// reads it: the `monitor` config key (its values, its validation, its
// documented description) and monitor selection.
#include "mrcache/monitors/monitor_table.h"

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "mrcache/config.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"

namespace mrcache {
namespace {

const ConfigKeyInfo& MonitorKey() {
  for (const ConfigKeyInfo& key : Config::KeyTable()) {
    if (std::string(key.name) == "monitor") return key;
  }
  static const ConfigKeyInfo missing{"", "", ""};
  ADD_FAILURE() << "no `monitor` key";
  return missing;
}

TEST(MonitorTableTest, StartsWithNoneAndEndsWithAuto) {
  ASSERT_GE(MonitorTable().size(), 2u);
  EXPECT_EQ(MonitorTable().front().id, MonitorId::kNone);
  EXPECT_EQ(MonitorTable().back().id, MonitorId::kAuto);
}

TEST(MonitorTableTest, EveryRowIsFoundByItsNameAndItsId) {
  for (const MonitorRow& row : MonitorTable()) {
    EXPECT_EQ(FindMonitor(row.name), &row) << row.name;
    EXPECT_EQ(&MonitorRowOf(row.id), &row) << row.name;
    EXPECT_NE(*row.description, '\0') << row.name;
  }
  EXPECT_EQ(FindMonitor("sybmols"), nullptr);
  EXPECT_EQ(FindMonitor(""), nullptr);
}

TEST(MonitorTableTest, EveryRowNotUsableAloneSaysWhyAndWhatItAddsToAuto) {
  for (const MonitorRow& row : MonitorTable()) {
    if (row.usable_alone) continue;
    EXPECT_NE(*row.why_not_alone, '\0') << row.name;
    EXPECT_NE(*row.added_to_auto, '\0') << row.name;
  }
}

TEST(MonitorTableTest, TheConfigKeyAcceptsEveryNameAndEveryListOfThem) {
  for (const MonitorRow& row : MonitorTable()) {
    Config c;
    EXPECT_TRUE(c.Set("monitor", row.name).ok()) << row.name;
    EXPECT_TRUE(c.Set("monitor", absl::StrCat("auto+", row.name)).ok()) << row.name;
  }
}

TEST(MonitorTableTest, TheConfigKeyRefusesAnUnknownOrEmptyPart) {
  Config c;
  EXPECT_EQ(StatusToErrno(c.Set("monitor", "sybmols")), EINVAL);
  EXPECT_EQ(StatusToErrno(c.Set("monitor", "patch+")), EINVAL);
  EXPECT_EQ(StatusToErrno(c.Set("monitor", "")), EINVAL);
}

TEST(MonitorTableTest, ValidateRefusesAMonitorNotUsableAloneWithoutOneThatReportsBefore) {
  for (const MonitorRow& row : MonitorTable()) {
    Config c;
    c.monitor = row.name;
    EXPECT_EQ(c.Validate().ok(), row.usable_alone) << row.name;
    if (row.usable_alone) continue;
    EXPECT_EQ(StatusToErrno(c.Validate()), EINVAL);
    EXPECT_NE(c.Validate().message().find(row.why_not_alone), absl::string_view::npos);
    for (const MonitorRow& other : MonitorTable()) {
      c.monitor = absl::StrCat(other.name, "+", row.name);
      EXPECT_EQ(c.Validate().ok(), other.reports_libc_releases_before) << c.monitor;
    }
  }
}

TEST(MonitorTableTest, MonitorNeedingAFenceIsTheFirstPartNotUsableAlone) {
  const MonitorRow& uffd = MonitorRowOf(MonitorId::kUffd);
  EXPECT_EQ(MonitorNeedingAFence("uffd"), &uffd);
  EXPECT_EQ(MonitorNeedingAFence("jemalloc+uffd"), &uffd);
  EXPECT_EQ(MonitorNeedingAFence("none+uffd"), &uffd);
  EXPECT_EQ(MonitorNeedingAFence("uffd+patch"), nullptr);
  EXPECT_EQ(MonitorNeedingAFence("auto+uffd"), nullptr);
  EXPECT_EQ(MonitorNeedingAFence("jemalloc"), nullptr);
}

TEST(MonitorTableTest, TheConfigKeyDescriptionIsTheTables) {
  const std::string values = MonitorKey().values;
  EXPECT_EQ(values, MonitorKeyDescription());
  for (const MonitorRow& row : MonitorTable()) {
    EXPECT_NE(values.find(absl::StrCat("`", row.name, "`")), std::string::npos) << row.name;
  }
}

TEST(MonitorTableTest, TheConfigKeyDescriptionReadsAsDocumented) {
  // README.md and mrcache(7) show this text (config_table_test.sh).
  EXPECT_EQ(MonitorKeyDescription(),
            "`none`, `symbols`, `patch`, `uffd`, `jemalloc`, `auto` (adds `uffd` where a "
            "sanitizer runtime is loaded), or a `+`-joined list (`auto+uffd`: also an inline "
            "`syscall` instruction); `uffd` only with `symbols`, `patch` or `auto`");
}

TEST(MonitorTableTest, SelectionKnowsEveryNameOfTheTable) {
  // Installable or not here (ENOTSUP with the reason), never unknown.
  for (const MonitorRow& row : MonitorTable()) {
    auto lease = AcquireMonitor(row.name);
    if (!lease.ok()) {
      EXPECT_NE(StatusToErrno(lease.status()), EINVAL) << row.name << ": " << lease.status();
    }
  }
}

TEST(MonitorTableTest, SelectionNamesTheTableForAnUnknownName) {
  auto lease = AcquireMonitor("sybmols");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(StatusToErrno(lease.status()), EINVAL);
  EXPECT_NE(lease.status().message().find(MonitorNames("|")), absl::string_view::npos);
}

TEST(MonitorTableTest, ALeaseIsCompleteExactlyWhenTheTableSaysSo) {
  for (const MonitorRow& row : MonitorTable()) {
    if (row.reports != MonitorReports::kBefore && row.reports != MonitorReports::kAfter) continue;
    auto lease = AcquireMonitor(row.name);
    if (!lease.ok()) continue;  // not installable here: nothing to compare
    EXPECT_EQ((*lease)->complete(), row.complete) << row.name;
    EXPECT_EQ((*lease)->name(), row.name);
  }
}

}  // namespace
}  // namespace mrcache
