// uring_rings.h: the uring registrar's rings, and which of them a new
// registration should use so that it does not wait behind an unregistration.
//
// io_uring runs every io_uring_register(2) of a ring under that ring's lock
// (ctx->uring_lock), and unregistering a fixed buffer unpins its pages inside
// that call: a 1 GiB buffer holds the lock for 5 to 150 ms. A registration
// made meanwhile on the same ring waits for all of it, even of 4 KiB. With
// several rings, each holding a sparse table of the same size, a registration
// goes to the ring with the fewest bytes being registered or unregistered on
// it now, so it waits for nobody's unregistration while another ring is idle;
// a registration's slot stays on the ring it was registered on, and is
// unregistered there.
//
// Invariants:
//  - Every ring has a sparse fixed-buffer table of the same `slots` entries.
//  - bytes_in_flight(r) is the sum of the lengths of the register calls
//    running on ring r now (each counted by one Busy, for its lifetime).
// Thread safety: LeastBusy and Busy are lock-free and may race; two racing
// callers may pick the same ring, which costs a wait and nothing else. The
// rings' submission and completion queues are not guarded here: their user
// serializes them (io_uring_register only uses the ring's fd).
#ifndef MRCACHE_REGISTRARS_URING_RINGS_H_
#define MRCACHE_REGISTRARS_URING_RINGS_H_

#include <liburing.h>

#include <atomic>
#include <cstddef>

namespace mrcache {

class UringRings {
 public:
  // Rings per registrar: one can unregister a big buffer (the process has
  // one background deregistration thread) while the other registers. Each
  // ring costs two pages of RLIMIT_MEMLOCK in a process without
  // CAP_IPC_LOCK (its submission and completion queues), so no more.
  static constexpr unsigned kCount = 2;

  // The errno of the step that failed and its name (err 0: success).
  struct Setup {
    int err = 0;
    const char* step = "";
  };

  UringRings() = default;
  UringRings(const UringRings&) = delete;
  UringRings& operator=(const UringRings&) = delete;
  // Unregisters every ring's table (unpinning what is still registered) and
  // closes the rings.
  ~UringRings();

  // Creates kCount rings with sparse tables of `slots` entries; on failure
  // none is left open. Call once, before any other call.
  Setup Init(unsigned slots);

  // The ring with the fewest bytes in flight now (the lowest index among
  // equals). Init must have succeeded.
  unsigned LeastBusy() const;

  io_uring* ring(unsigned index) { return &rings_[index].ring; }

  // Counts `bytes` in flight on ring `index` for its lifetime (wrap an
  // io_uring_register call in one).
  class Busy {
   public:
    Busy(UringRings& rings, unsigned index, size_t bytes)
        : in_flight_(rings.rings_[index].bytes_in_flight), bytes_(bytes) {
      in_flight_.fetch_add(bytes_, std::memory_order_relaxed);
    }
    ~Busy() { in_flight_.fetch_sub(bytes_, std::memory_order_relaxed); }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    std::atomic<size_t>& in_flight_;
    const size_t bytes_;
  };

 private:
  struct Ring {
    io_uring ring{};
    std::atomic<size_t> bytes_in_flight{0};
  };

  // Unregisters and closes the rings created so far.
  void CloseAll();

  Ring rings_[kCount];
  unsigned ready_ = 0;  // rings created (all of them once Init succeeded)
};

// Creates one ring of 8 entries with a sparse table of `slots` buffers.
UringRings::Setup SetUpUringRing(io_uring* ring, unsigned slots);

}  // namespace mrcache

#endif  // MRCACHE_REGISTRARS_URING_RINGS_H_
