// dcheck.cc: the failure path of MRCACHE_DCHECK (dcheck.h).
#include "mrcache/core/dcheck.h"

#include <cstdio>
#include <cstdlib>

namespace mrcache {

void DcheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "mrcache: invariant violated: %s (%s:%d)\n", condition, file, line);
  std::abort();
}

}  // namespace mrcache
