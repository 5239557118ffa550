// monitor_table.cc: the rows of the monitor table and what is derived from
// them (monitor_table.h).
#include "mrcache/monitors/monitor_table.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mrcache {
namespace {

// Indexed by MonitorId (MonitorRowOf checks it).
constexpr MonitorRow kRows[] = {
    {MonitorId::kNone, "none",
     "reports nothing: the application invalidates, or uses ODP, and never frees registered "
     "memory otherwise",
     MonitorReports::kNothing, false, false, true, "", "", ""},
    {MonitorId::kSymbols, "symbols",
     "libc's memory entry points interposed by symbol (calls through the PLT), only in an "
     "executable that exports the interposers",
     MonitorReports::kBefore, true, false, true, "", "", ""},
    {MonitorId::kPatch, "patch",
     "libc's memory entry points and syscall() patched in place: every release made through "
     "libc, its internal calls included",
     MonitorReports::kBefore, true, true, true, "", "", ""},
    {MonitorId::kUffd, "uffd",
     "userfaultfd events on the mappings that hold registered memory, after the kernel let go "
     "of it; also system calls made without libc",
     MonitorReports::kAfter, false, true, false,
     "uffd alone cannot keep registrations fresh when threads release and map memory "
     "concurrently (the kernel reports munmap and mremap after other threads can map the "
     "addresses again, madvise(DONTNEED) before its pages go)",
     "", "also an inline `syscall` instruction"},
    {MonitorId::kJemalloc, "jemalloc", "jemalloc's extent hooks, when jemalloc is the allocator",
     MonitorReports::kBefore, false, false, true, "", "", ""},
    {MonitorId::kAuto, "auto",
     "patch (else symbols), plus jemalloc when it is the allocator, plus uffd where a sanitizer "
     "runtime is loaded",
     MonitorReports::kCombination, true, false, true, "",
     "adds `uffd` where a sanitizer runtime is loaded", ""},
};

constexpr bool RowsFollowIds() {
  for (size_t i = 0; i < sizeof(kRows) / sizeof(kRows[0]); ++i) {
    if (static_cast<size_t>(kRows[i].id) != i) return false;
  }
  return true;
}
static_assert(RowsFollowIds(), "kRows is indexed by MonitorId");

std::vector<absl::string_view> Parts(absl::string_view list) { return absl::StrSplit(list, '+'); }

}  // namespace

absl::Span<const MonitorRow> MonitorTable() { return kRows; }

const MonitorRow* FindMonitor(absl::string_view name) {
  for (const MonitorRow& row : kRows) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

const MonitorRow& MonitorRowOf(MonitorId id) { return kRows[static_cast<size_t>(id)]; }

std::string MonitorNames(absl::string_view separator) {
  std::vector<const char*> names;
  for (const MonitorRow& row : kRows) names.push_back(row.name);
  return absl::StrJoin(names, separator);
}

std::string MonitorsThatFence() {
  std::vector<std::string> names;
  for (const MonitorRow& row : kRows) {
    if (row.reports_libc_releases_before) names.push_back(absl::StrCat("`", row.name, "`"));
  }
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

bool KnownMonitorList(absl::string_view list) {
  for (absl::string_view part : Parts(list)) {
    if (FindMonitor(part) == nullptr) return false;
  }
  return true;
}

const MonitorRow* MonitorNeedingAFence(absl::string_view list) {
  const MonitorRow* needs = nullptr;
  for (absl::string_view part : Parts(list)) {
    const MonitorRow* row = FindMonitor(part);
    if (row == nullptr) continue;
    if (row->reports_libc_releases_before) return nullptr;
    if (!row->usable_alone && needs == nullptr) needs = row;
  }
  return needs;
}

std::string MonitorKeyDescription() {
  std::vector<std::string> names, combinations, restrictions;
  for (const MonitorRow& row : kRows) {
    std::string name = absl::StrCat("`", row.name, "`");
    if (*row.key_remark != '\0') absl::StrAppend(&name, " (", row.key_remark, ")");
    names.push_back(name);
    if (!row.usable_alone) {
      combinations.push_back(absl::StrCat("`auto+", row.name, "`: ", row.added_to_auto));
      restrictions.push_back(absl::StrCat("`", row.name, "` only with ", MonitorsThatFence()));
    }
  }
  std::string text = absl::StrJoin(names, ", ");
  absl::StrAppend(&text, ", or a `+`-joined list");
  if (!combinations.empty()) absl::StrAppend(&text, " (", absl::StrJoin(combinations, "; "), ")");
  for (const std::string& r : restrictions) absl::StrAppend(&text, "; ", r);
  return text;
}

}  // namespace mrcache
