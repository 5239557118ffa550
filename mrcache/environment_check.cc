#include "mrcache/environment_check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "mrcache/config.h"
#include "mrcache/internal/log.h"

extern char** environ;

namespace mrcache {
namespace {

constexpr absl::string_view kPrefix = "MRCACHE_";
constexpr size_t kMaxSuggestionDistance = 3;

// Levenshtein distance: insertions, deletions and substitutions cost 1.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> KnownVariables() {
  std::vector<std::string> known = NonKeyVariables();
  for (const std::string& key : Config::Keys()) {
    known.push_back(absl::StrCat(kPrefix, absl::AsciiStrToUpper(key)));
  }
  return known;
}

}  // namespace

const std::vector<std::string>& NonKeyVariables() {
  static const auto* names = new std::vector<std::string>{
      "MRCACHE_STATS",        // the shim's summary at exit (interpose/stats_report.h)
      "MRCACHE_PRELOAD_LIB",  // the shim mrcache-run preloads
      "MRCACHE_RECORD",       // the shim's registration stream (interpose/recorder.h)
      // Knobs of mrcache's own test suites and scripts (tests/, scripts/).
      "MRCACHE_TEST_DEVICE",
      "MRCACHE_RACE_ITERATIONS",
      "MRCACHE_DIFF_OPS",
      "MRCACHE_DIFF_SEED",
      "MRCACHE_FUZZ_SECONDS",
      "MRCACHE_MATRIX_PASSES",
      "MRCACHE_SOAK_SECONDS",
  };
  return *names;
}

std::vector<UnknownVariable> FindUnknownVariables(const char* const* environment) {
  std::vector<UnknownVariable> unknown;
  if (environment == nullptr) return unknown;
  const std::vector<std::string> known = KnownVariables();
  for (const char* const* entry = environment; *entry != nullptr; ++entry) {
    absl::string_view name(*entry);
    name = name.substr(0, name.find('='));
    if (!absl::StartsWith(name, kPrefix)) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    UnknownVariable u{std::string(name), ""};
    size_t best = kMaxSuggestionDistance + 1;
    for (const std::string& k : known) {
      const size_t d = EditDistance(name, k);
      if (d < best) {
        best = d;
        u.suggestion = k;
      }
    }
    unknown.push_back(std::move(u));
  }
  return unknown;
}

std::string UnknownVariablesWarning(const std::vector<UnknownVariable>& unknown) {
  if (unknown.empty()) return "";
  std::string line = unknown.size() == 1 ? "ignoring unknown environment variable "
                                         : "ignoring unknown environment variables ";
  for (size_t i = 0; i < unknown.size(); ++i) {
    if (i > 0) line += ", ";
    line += unknown[i].name;
    if (!unknown[i].suggestion.empty())
      absl::StrAppend(&line, " (did you mean ", unknown[i].suggestion, "?)");
  }
  return line;
}

void WarnAboutUnknownVariablesOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string warning = UnknownVariablesWarning(FindUnknownVariables(environ));
    if (!warning.empty()) Log(LogLevel::kWarning, warning);
  });
}

}  // namespace mrcache
