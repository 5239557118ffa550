// monitor_table.h: the one table of memory monitors.
//
// Every name the `monitor` configuration key accepts, in documentation
// order, with what it reports and how it may be combined. The config key
// (parsing, validation, its documented values), monitor selection
// (monitor.cc), mrcache-run's usage, mrcache-info and the tests of the
// documents (tests/docs/monitor_table_test.sh) all read it; a monitor is
// added or renamed here and nowhere else. This file knows nothing of how a
// monitor is installed (monitor.cc maps each MonitorId to its code).
#ifndef MRCACHE_MONITORS_MONITOR_TABLE_H_
#define MRCACHE_MONITORS_MONITOR_TABLE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mrcache {

enum class MonitorId { kNone, kSymbols, kPatch, kUffd, kJemalloc, kAuto };

// When a monitor reports a release, relative to the release itself.
enum class MonitorReports {
  kNothing,      // `none`: the application invalidates, or uses ODP
  kBefore,       // hooks on the releasing thread, before the memory goes
  kAfter,        // the kernel's events, after the memory went
  kCombination,  // `auto`: the hooks that install here (monitor.h)
};

struct MonitorRow {
  MonitorId id;
  const char* name;
  // What it watches, one sentence (mrcache-info --monitors).
  const char* description;
  MonitorReports reports;
  // Reports every release made through libc before the memory goes (its
  // calls through the PLT at least): what a kAfter monitor needs beside it
  // to keep registrations fresh when threads release and map concurrently.
  bool reports_libc_releases_before;
  // Every release of registered memory is reported, libc's internal calls
  // included (MonitorLease::complete()).
  bool complete;
  // False: Config::Validate refuses a list that names it without a monitor
  // that reports_libc_releases_before (EINVAL, with why_not_alone).
  bool usable_alone;
  const char* why_not_alone;  // "" when usable_alone
  // The remark after its name in the `monitor` key's description, "" if none.
  const char* key_remark;
  // What `auto+<name>` adds to auto, for a monitor not usable alone; "".
  const char* added_to_auto;
};

// Every monitor, in documentation order (none first, auto last).
absl::Span<const MonitorRow> MonitorTable();
// The row named `name` exactly, or nullptr.
const MonitorRow* FindMonitor(absl::string_view name);
// The row of `id` (every MonitorId has one).
const MonitorRow& MonitorRowOf(MonitorId id);
// The names, in table order, joined by `separator` ("none|symbols|...").
std::string MonitorNames(absl::string_view separator);
// The names of the rows that reports_libc_releases_before, in table order,
// as Markdown code joined like prose: "`symbols`, `patch` or `auto`".
std::string MonitorsThatFence();
// True if every '+'-separated part of `list` is a monitor's name.
bool KnownMonitorList(absl::string_view list);
// The first monitor of `list` (its parts known) that is not usable alone
// while no part reports libc's releases before they happen; nullptr if none.
const MonitorRow* MonitorNeedingAFence(absl::string_view list);
// The `monitor` configuration key's description (Markdown), from the rows.
std::string MonitorKeyDescription();

}  // namespace mrcache

#endif  // MRCACHE_MONITORS_MONITOR_TABLE_H_
