#include "tests/softverbs/pin_table.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace softverbs {

PinTable::~PinTable() {
  if (ring_ready_) io_uring_queue_exit(&ring_);  // unpins whatever is left
  if (memfd_ >= 0) close(memfd_);
}

int PinTable::Init(unsigned slots) {
  if (slots == 0 || slots > 16384) return EINVAL;
  int ret = io_uring_queue_init(4, &ring_, 0);
  if (ret < 0) return -ret;
  ring_ready_ = true;
  ret = io_uring_register_buffers_sparse(&ring_, slots);
  if (ret < 0) return -ret;
  memfd_ = memfd_create("softverbs-dma", MFD_CLOEXEC);
  if (memfd_ < 0) return errno;
  free_.reserve(slots);
  for (unsigned s = slots; s > 0; --s) free_.push_back(s - 1);
  return 0;
}

int PinTable::SetSlot(uint32_t slot, void* addr, size_t len) {
  iovec iov{addr, len};
  __u64 tag = 0;
  int ret = io_uring_register_buffers_update_tag(&ring_, slot, &iov, &tag, 1);
  if (ret < 0) return -ret;
  return ret == 1 ? 0 : EIO;
}

int PinTable::Pin(void* addr, size_t len, std::vector<uint32_t>* out) {
  const size_t chunks = len / kMaxSlotBytes + (len % kMaxSlotBytes != 0);
  std::vector<uint32_t> taken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < chunks) return ENOMEM;
    taken.assign(free_.end() - chunks, free_.end());
    free_.resize(free_.size() - chunks);
  }
  // The kernel serialises buffer updates itself; no lock needed here.
  int err = 0;
  size_t done = 0;
  for (size_t i = 0; i < chunks; ++i) {
    size_t part = std::min(kMaxSlotBytes, len - i * kMaxSlotBytes);
    err = SetSlot(taken[i], static_cast<char*>(addr) + i * kMaxSlotBytes, part);
    if (err != 0) break;
    ++done;
  }
  if (err != 0) {
    for (size_t i = 0; i < done; ++i) SetSlot(taken[i], nullptr, 0);
    std::lock_guard<std::mutex> lock(mu_);
    free_.insert(free_.end(), taken.begin(), taken.end());
    return err;
  }
  *out = std::move(taken);
  return 0;
}

void PinTable::Unpin(const std::vector<uint32_t>& slots) {
  for (uint32_t s : slots) SetSlot(s, nullptr, 0);
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(free_.end(), slots.begin(), slots.end());
}

int PinTable::Fixed(bool into_buffer, uint32_t slot, uintptr_t target, size_t len) {
  // Caller holds mu_. The memfd holds (or receives) the payload at offset 0.
  size_t done = 0;
  while (done < len) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return EBUSY;
    if (into_buffer) {
      io_uring_prep_read_fixed(sqe, memfd_, reinterpret_cast<void*>(target + done),
                               static_cast<unsigned>(len - done), done, static_cast<int>(slot));
    } else {
      io_uring_prep_write_fixed(sqe, memfd_, reinterpret_cast<const void*>(target + done),
                                static_cast<unsigned>(len - done), done, static_cast<int>(slot));
    }
    int ret = io_uring_submit(&ring_);
    if (ret < 0) return -ret;
    io_uring_cqe* cqe = nullptr;
    ret = io_uring_wait_cqe(&ring_, &cqe);
    if (ret < 0) return -ret;
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (res < 0) return -res;
    if (res == 0) return EIO;
    done += static_cast<size_t>(res);
  }
  return 0;
}

int PinTable::Write(const std::vector<uint32_t>& slots, uintptr_t start, uintptr_t target,
                    const void* src, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* from = static_cast<const char*>(src);
  while (len > 0) {
    size_t index = (target - start) / kMaxSlotBytes;
    uintptr_t slot_end = start + (index + 1) * kMaxSlotBytes;
    size_t part = std::min<size_t>(len, slot_end - target);
    // Stage the payload in the memfd, then let the kernel DMA-copy it into the
    // fixed buffer's pinned pages.
    size_t staged = 0;
    while (staged < part) {
      ssize_t n = pwrite(memfd_, from + staged, part - staged, static_cast<off_t>(staged));
      if (n < 0) return errno;
      staged += static_cast<size_t>(n);
    }
    if (index >= slots.size()) return ERANGE;
    int err = Fixed(/*into_buffer=*/true, slots[index], target, part);
    if (err != 0) return err;
    from += part;
    target += part;
    len -= part;
  }
  return 0;
}

int PinTable::Read(const std::vector<uint32_t>& slots, uintptr_t start, uintptr_t target, void* dst,
                   size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  char* to = static_cast<char*>(dst);
  while (len > 0) {
    size_t index = (target - start) / kMaxSlotBytes;
    uintptr_t slot_end = start + (index + 1) * kMaxSlotBytes;
    size_t part = std::min<size_t>(len, slot_end - target);
    if (index >= slots.size()) return ERANGE;
    // Let the kernel copy the pinned pages out into the memfd, then read it.
    int err = Fixed(/*into_buffer=*/false, slots[index], target, part);
    if (err != 0) return err;
    size_t copied = 0;
    while (copied < part) {
      ssize_t n = pread(memfd_, to + copied, part - copied, static_cast<off_t>(copied));
      if (n < 0) return errno;
      if (n == 0) return EIO;
      copied += static_cast<size_t>(n);
    }
    to += part;
    target += part;
    len -= part;
  }
  return 0;
}

}  // namespace softverbs
