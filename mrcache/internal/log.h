// log.h: every message mrcache writes for a person goes through here.
//
// By default a message is written to stderr as one line, "mrcache: <message>".
// mrc_set_log_callback (mrcache.h) sends messages to the application instead
// (to route them into its own log, or drop them). The sink is process-wide.
// Never call these from a memory hook: they may allocate and lock.
#ifndef MRCACHE_LOG_H_
#define MRCACHE_LOG_H_

#include "absl/strings/string_view.h"

namespace mrcache {

// Values equal the C API's MRC_LOG_*.
enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2 };

using LogCallback = void (*)(void* arg, int level, const char* message);

// Delivers `message` (one line, no trailing newline) to the current sink.
// Thread-safe. The callback, if any, is called with no mrcache lock held.
__attribute__((cold)) void Log(LogLevel level, absl::string_view message);

// Replaces the sink: `fn` receives every later message; nullptr restores
// stderr. Thread-safe; a message being delivered concurrently may still reach
// the previous sink.
void SetLogCallback(LogCallback fn, void* arg);

}  // namespace mrcache

#endif  // MRCACHE_LOG_H_
