// pin_table.h: real page pinning through an io_uring sparse fixed-buffer table.
//
// softverbs pins the pages of every non-ODP memory region the way a NIC
// driver does: io_uring's buffer registration takes the same long-term GUP pin
// (FOLL_WRITE | FOLL_LONGTERM) that ib_umem_get takes for ibv_reg_mr. Once
// pinned, a region keeps its physical pages even if the application munmaps
// and re-mmaps the virtual range, so a stale registration is observable:
// Write() copies data into the pinned pages (IORING_OP_READ_FIXED from a
// memfd), not into whatever the address maps to now.
//
// Invariants:
//  - One table per device context; `slots` entries (at most 16384, the kernel
//    limit), each holding at most 1 GiB, so a region of n GiB uses ceil(n)
//    slots. A full table is ENOMEM, like a NIC out of translation entries.
//  - A slot is either free or owned by exactly one Pin result; Unpin returns
//    it. Pin and Unpin are thread-safe; Write serialises on the ring.
#ifndef SOFTVERBS_PIN_TABLE_H_
#define SOFTVERBS_PIN_TABLE_H_

#include <liburing.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace softverbs {

class PinTable {
 public:
  static constexpr size_t kMaxSlotBytes = size_t{1} << 30;

  PinTable() = default;
  PinTable(const PinTable&) = delete;
  PinTable& operator=(const PinTable&) = delete;
  ~PinTable();

  // Creates the ring and its sparse table. 0 or an errno.
  int Init(unsigned slots);
  // The ring's file descriptor (-1 before Init).
  int fd() const { return ring_ready_ ? ring_.ring_fd : -1; }

  // Pins [addr, addr+len) into free slots, in order. 0 and *out filled, or an
  // errno: EFAULT unmapped (or not writable) memory, ENOMEM table full or
  // RLIMIT_MEMLOCK, anything else the kernel says.
  int Pin(void* addr, size_t len, std::vector<uint32_t>* out);
  // Releases the slots (the kernel unpins the pages).
  void Unpin(const std::vector<uint32_t>& slots);
  // Copies src into the pinned pages behind [target, target+len), where the
  // region starts at `start` and was pinned into `slots`. 0 or an errno.
  int Write(const std::vector<uint32_t>& slots, uintptr_t start, uintptr_t target, const void* src,
            size_t len);
  // The reverse: copies the pinned pages behind [target, target+len) into
  // dst (IORING_OP_WRITE_FIXED into the memfd, then pread). 0 or an errno.
  int Read(const std::vector<uint32_t>& slots, uintptr_t start, uintptr_t target, void* dst,
           size_t len);

  // fork(): held across it (registry.cc's atfork handlers), so the child
  // never inherits the table's lock taken by another thread.
  void LockForFork() { mu_.lock(); }
  void UnlockAfterFork() { mu_.unlock(); }

 private:
  int SetSlot(uint32_t slot, void* addr, size_t len);
  // Moves len bytes between the fixed buffer `slot` at `target` and the
  // memfd at offset 0: into the buffer (READ_FIXED) or out of it (WRITE_FIXED).
  int Fixed(bool into_buffer, uint32_t slot, uintptr_t target, size_t len);

  std::mutex mu_;  // guards free_ and, for Write, the ring's queues and memfd_
  io_uring ring_{};
  bool ring_ready_ = false;
  int memfd_ = -1;
  std::vector<uint32_t> free_;  // free slot numbers (a stack)
};

}  // namespace softverbs

#endif  // SOFTVERBS_PIN_TABLE_H_
