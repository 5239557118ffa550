// uring_rings.cc: see uring_rings.h for the contract.
#include "mrcache/registrars/uring_rings.h"

namespace mrcache {

UringRings::Setup SetUpUringRing(io_uring* ring, unsigned slots) {
  int rc = io_uring_queue_init(8, ring, 0);
  if (rc < 0) return {-rc, "io_uring_setup"};
  rc = io_uring_register_buffers_sparse(ring, slots);
  if (rc < 0) {
    io_uring_queue_exit(ring);
    return {-rc, "IORING_REGISTER_BUFFERS2 (sparse)"};
  }
  return {};
}

UringRings::~UringRings() { CloseAll(); }

void UringRings::CloseAll() {
  for (; ready_ > 0; --ready_) {
    io_uring_unregister_buffers(&rings_[ready_ - 1].ring);
    io_uring_queue_exit(&rings_[ready_ - 1].ring);
  }
}

UringRings::Setup UringRings::Init(unsigned slots) {
  for (; ready_ < kCount; ++ready_) {
    Setup setup = SetUpUringRing(&rings_[ready_].ring, slots);
    if (setup.err != 0) {
      CloseAll();
      return setup;
    }
  }
  return {};
}

unsigned UringRings::LeastBusy() const {
  unsigned best = 0;
  size_t best_bytes = rings_[0].bytes_in_flight.load(std::memory_order_relaxed);
  for (unsigned i = 1; i < kCount && best_bytes != 0; ++i) {
    const size_t bytes = rings_[i].bytes_in_flight.load(std::memory_order_relaxed);
    if (bytes < best_bytes) {
      best = i;
      best_bytes = bytes;
    }
  }
  return best;
}

}  // namespace mrcache
