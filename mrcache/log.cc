#include "mrcache/log.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace mrcache {
namespace {

struct Sink {
  LogCallback fn = nullptr;
  void* arg = nullptr;
};

std::mutex& SinkMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

Sink& CurrentSink() {  // guarded by SinkMutex()
  static Sink sink;
  return sink;
}

}  // namespace

void Log(LogLevel level, absl::string_view message) {
  Sink sink;
  {
    std::lock_guard<std::mutex> lock(SinkMutex());
    sink = CurrentSink();
  }
  const std::string text(message);
  if (sink.fn != nullptr) {
    sink.fn(sink.arg, static_cast<int>(level), text.c_str());
    return;
  }
  std::fprintf(stderr, "mrcache: %s\n", text.c_str());
}

void SetLogCallback(LogCallback fn, void* arg) {
  std::lock_guard<std::mutex> lock(SinkMutex());
  CurrentSink() = Sink{fn, arg};
}

}  // namespace mrcache
