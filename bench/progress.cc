#include "bench/progress.h"

#include <unistd.h>

#include <cstdio>

#include "bench/counting_registrar.h"

namespace mrbench {

Progress::Progress(std::string label)
    : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) == 1), start_ns_(NowNs()) {}

void Progress::Update(size_t done, size_t total) {
  if (!enabled_) return;
  const uint64_t now = NowNs();
  if (now - start_ns_ < 1000000000u || now - last_ns_ < 100000000u) return;
  last_ns_ = now;
  shown_ = true;
  std::fprintf(stderr, "\r\033[Kmrbench: %s %zu/%zu transfers (%.0f%%), %.1f s", label_.c_str(),
               done, total, total ? 100.0 * double(done) / double(total) : 100.0,
               double(now - start_ns_) / 1e9);
  std::fflush(stderr);
}

void Progress::Done() {
  if (!shown_) return;
  shown_ = false;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace mrbench
