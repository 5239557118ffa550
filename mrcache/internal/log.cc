#include "mrcache/internal/log.h"

#include <cstdio>
#include <string>

#include "absl/base/attributes.h"
#include "mrcache/internal/mutex.h"

namespace mrcache {
namespace {

struct Sink {
  LogCallback fn = nullptr;
  void* arg = nullptr;
};

ABSL_CONST_INIT Mutex g_sink_mu;
ABSL_CONST_INIT Sink g_sink ABSL_GUARDED_BY(g_sink_mu);

}  // namespace

void Log(LogLevel level, absl::string_view message) {
  Sink sink;
  {
    MutexLock lock(&g_sink_mu);
    sink = g_sink;
  }
  const std::string text(message);
  if (sink.fn != nullptr) {
    sink.fn(sink.arg, static_cast<int>(level), text.c_str());
    return;
  }
  std::fprintf(stderr, "mrcache: %s\n", text.c_str());
}

void SetLogCallback(LogCallback fn, void* arg) {
  MutexLock lock(&g_sink_mu);
  g_sink = Sink{fn, arg};
}

}  // namespace mrcache
