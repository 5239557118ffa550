// environment_check.h: MRCACHE_* variables that mrcache does not read.
//
// A misspelled variable (MRCACHE_MAX_BYTE, MRCACHE_MONTOR) would otherwise be
// ignored without a word. Config::ApplyEnvironment calls
// WarnAboutUnknownVariablesOnce, which writes one line to stderr per process
// naming every unknown MRCACHE_* variable with the closest known name
// (through the log sink, log.h).
#ifndef MRCACHE_ENVIRONMENT_CHECK_H_
#define MRCACHE_ENVIRONMENT_CHECK_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mrcache {

struct UnknownVariable {
  std::string name;  // e.g. "MRCACHE_MAX_BYTE"
  std::string
      suggestion;  // the closest known name, e.g. "MRCACHE_MAX_BYTES"; empty if none is close
};

// The MRCACHE_* variables mrcache reads besides the configuration keys
// (MRCACHE_<KEY> for every Config::Keys() entry).
const std::vector<std::string>& NonKeyVariables();

// Every MRCACHE_* name in `environment` (entries "NAME=value", as environ
// holds them) that is neither a configuration key's variable nor in
// NonKeyVariables(), in the order found. A name within edit distance 3 of a
// known one gets the closest as its suggestion.
std::vector<UnknownVariable> FindUnknownVariables(const char* const* environment);

// The warning line for `unknown` (without the trailing newline), e.g.
// "ignoring unknown environment variable MRCACHE_MAX_BYTE (did you
// mean MRCACHE_MAX_BYTES?)"; empty if `unknown` is empty.
std::string UnknownVariablesWarning(const std::vector<UnknownVariable>& unknown);

// Writes UnknownVariablesWarning(FindUnknownVariables(environ)) to stderr,
// the first time it is called in the process (later calls do nothing).
void WarnAboutUnknownVariablesOnce();

}  // namespace mrcache

#endif  // MRCACHE_ENVIRONMENT_CHECK_H_
