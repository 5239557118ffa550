#include "mrcache/core/covering_hints.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "mrcache/core/table_memory.h"

namespace mrcache {

CoveringHints::CoveringHints(size_t lines) : lines_count_(lines) {
  while ((size_t{1} << (64 - shift_)) < lines) --shift_;
  void* p = MapTableMemory(lines * sizeof(Line));
  if (p == MAP_FAILED) std::abort();
  lines_ = static_cast<Line*>(p);
  for (size_t i = 0; i < lines; ++i) new (&lines_[i]) Line();
}

void CoveringHints::VoidAll() {
  if (++epoch_ != 0) return;
  // Epoch 0 marks an empty hint, and the epochs begin again: empty them all,
  // so that no hint of 2^32 epochs ago answers.
  epoch_ = 1;
  for (size_t i = 0; i < lines_count_; ++i) {
    for (Hint& h : lines_[i].hints) {
      h.epoch.store(0, std::memory_order_relaxed);
      h.region.store(nullptr, std::memory_order_relaxed);
    }
  }
}

CoveringHints::~CoveringHints() {
  if (lines_ != nullptr) UnmapTableMemory(lines_, lines_count_ * sizeof(Line));
}

}  // namespace mrcache
