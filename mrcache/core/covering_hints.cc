#include "mrcache/core/covering_hints.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "mrcache/core/table_memory.h"

namespace mrcache {

CoveringHints::CoveringHints(size_t lines) : lines_count_(lines) {
  while ((size_t{1} << (64 - shift_)) < lines) --shift_;
  void* p = MapTableMemory(lines * sizeof(Hint));
  if (p == MAP_FAILED) std::abort();
  lines_ = static_cast<Hint*>(p);
  for (size_t i = 0; i < lines; ++i) new (&lines_[i]) Hint();
}

CoveringHints::~CoveringHints() {
  if (lines_ != nullptr) UnmapTableMemory(lines_, lines_count_ * sizeof(Hint));
}

}  // namespace mrcache
