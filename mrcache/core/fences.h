// fences.h: the asymmetric fence pair of the reclamation protocol
// (cache_impl.h): ReaderFence on the lock-free hit and put, ReclaimerFence
// on the reclaimer's side. With MEMBARRIER_CMD_PRIVATE_EXPEDITED the reader
// needs only a compiler barrier, and reclaimers pay one membarrier() per
// batch; without it, the reader uses a full fence.
#ifndef MRCACHE_CORE_FENCES_H_
#define MRCACHE_CORE_FENCES_H_

#include <atomic>

namespace mrcache {

// Whether membarrier(PRIVATE_EXPEDITED) is available and registered, read
// once at start-up so that the hit path tests a constant.
extern const bool g_membarrier;

inline void ReaderFence() {
  if (g_membarrier) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

// A full fence on this thread and, with membarrier, on every thread of the
// process that is running.
void ReclaimerFence();

}  // namespace mrcache

#endif  // MRCACHE_CORE_FENCES_H_
