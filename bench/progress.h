// progress.h: a progress line on stderr for runs longer than a second.
//
// Only when stderr is a terminal; the line is rewritten in place (\r) at
// most ten times a second and erased by Done(), so the table on stdout and
// any redirected stderr stay clean.
#ifndef BENCH_PROGRESS_H_
#define BENCH_PROGRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace mrbench {

class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress() { Done(); }
  void Update(size_t done, size_t total);
  void Done();

 private:
  const std::string label_;
  const bool enabled_;
  const uint64_t start_ns_;
  uint64_t last_ns_ = 0;
  bool shown_ = false;
};

}  // namespace mrbench

#endif  // BENCH_PROGRESS_H_
