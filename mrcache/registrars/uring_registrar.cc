// uring_registrar.cc: see uring_registrar.h for the contract.
#include "mrcache/registrars/uring_registrar.h"

#include <liburing.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/internal/mutex.h"
#include "mrcache/registrars/pin_budget.h"
#include "mrcache/registrars/registration_checks.h"
#include "mrcache/registrars/uring_rings.h"

namespace mrcache {
namespace {

// The memfd keeps at most this much after a device transfer; larger contents
// are truncated away so a big DeviceWrite does not hold memory forever.
constexpr off_t kMemfdKeepBytes = off_t{1} << 20;

// io_uring decides when a ring is created whether the pages it pins count
// against RLIMIT_MEMLOCK (PinsCountAgainstMemlock, pin_budget.h).

// Errors that mean "this kernel or process cannot use io_uring fixed buffers".
bool MeansUnavailable(int err) {
  return err == ENOSYS || err == EPERM || err == EACCES || err == EINVAL || err == EOPNOTSUPP;
}

class UringRegistrar final : public Registrar {
 public:
  UringRegistrar(unsigned slots, bool memlock_accounted, int memfd)
      : memlock_accounted_(memlock_accounted), memfd_(memfd), slot_count_(slots), slots_(slots) {
    free_.reserve(slots);
    for (unsigned i = slots; i > 0; --i) free_.push_back(i - 1);
  }

  // Creates the rings; the registrar is unusable if this fails.
  UringRings::Setup Init() { return rings_.Init(slot_count_); }

  ~UringRegistrar() override {
    size_t live = 0;
    {
      MutexLock lock(&slots_mu_);
      for (const Slot& s : slots_) live += s.live;
    }
    if (live != 0) {
      Log(LogLevel::kWarning,
          absl::StrCat("uring registrar destroyed with ", live,
                       " buffer(s) still registered (a caller bug); unregistering them"));
    }
    close(memfd_);  // rings_, destroyed next, unregisters what is left
  }

  const char* name() const override { return "uring"; }
  // io_uring charges registered buffers to the user's RLIMIT_MEMLOCK.
  bool pins_memory() const override { return true; }
  size_t max_region_bytes() const override { return kUringMaxBufferBytes; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (absl::Status s = CheckRegisterArgs(addr, length, access); !s.ok()) return s;
    if (access & kAccessOnDemand) {
      return ErrnoStatus(ENOTSUP,
                         "io_uring fixed buffers cannot do on-demand paging "
                         "(IBV_ACCESS_ON_DEMAND)");
    }
    if (absl::Status s = CheckRegionLimit(addr, length, kUringMaxBufferBytes,
                                          "io_uring's fixed-buffer size (limited to 1 GiB)");
        !s.ok()) {
      return s;
    }
    unsigned slot;
    {
      MutexLock lock(&slots_mu_);
      if (free_.empty()) {
        return ErrnoStatus(
            ENOMEM, absl::StrCat("no free io_uring buffer slot (all ", slots_.size(), " in use)"));
      }
      slot = free_.back();
      free_.pop_back();
    }
    const unsigned ring = rings_.LeastBusy();
    iovec iov{addr, length};
    int rc;
    {
      UringRings::Busy busy(rings_, ring, length);
      rc = io_uring_register_buffers_update_tag(rings_.ring(ring), slot, &iov, nullptr, 1);
    }
    if (rc != 1) {
      ReleaseSlot(slot);
      return RegisterError(rc < 0 ? -rc : EIO, addr, length);
    }
    {
      MutexLock lock(&slots_mu_);
      slots_[slot] = Slot{addr, length, ring, true};
    }
    registrations_.fetch_add(1, std::memory_order_relaxed);
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = slot;
    reg.lkey = reg.rkey = slot + 1;
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    absl::StatusOr<SlotOnRing> slot = LiveSlot(reg, /*claim=*/true);
    if (!slot.ok()) return slot.status();
    iovec empty{nullptr, 0};
    int rc;
    {
      UringRings::Busy busy(rings_, slot->ring, reg.length);
      unregistering_.fetch_add(1, std::memory_order_relaxed);
      rc = io_uring_register_buffers_update_tag(rings_.ring(slot->ring), slot->index, &empty,
                                                nullptr, 1);
      unregistering_.fetch_sub(1, std::memory_order_relaxed);
    }
    ReleaseSlot(slot->index);
    deregistrations_.fetch_add(1, std::memory_order_relaxed);
    if (rc != 1) {
      // The contract: the registration counts as released either way.
      int err = rc < 0 ? -rc : EIO;
      return ErrnoStatus(err, absl::StrCat("unregistering io_uring buffer slot ", slot->index, ": ",
                                           std::strerror(err)));
    }
    return absl::OkStatus();
  }

  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    absl::StatusOr<SlotOnRing> slot = LiveSlot(reg);
    if (!slot.ok()) return slot.status();
    if (absl::Status s = CheckDeviceRange(reg, offset, length); !s.ok()) return s;
    if (length == 0) return absl::OkStatus();
    MutexLock lock(&transfer_mu_);
    if (absl::Status s = FillMemfd(src, length); !s.ok()) return s;
    absl::Status s = Transfer(*slot, static_cast<char*>(reg.addr) + offset, length,
                              /*into_buffer=*/true);
    TrimMemfd(length);
    return s;
  }

  absl::Status DeviceRead(const Registration& reg, size_t offset, void* dst, size_t length) {
    absl::StatusOr<SlotOnRing> slot = LiveSlot(reg);
    if (!slot.ok()) return slot.status();
    if (absl::Status s = CheckDeviceRange(reg, offset, length); !s.ok()) return s;
    if (length == 0) return absl::OkStatus();
    MutexLock lock(&transfer_mu_);
    absl::Status s = Transfer(*slot, static_cast<char*>(reg.addr) + offset, length,
                              /*into_buffer=*/false);
    if (s.ok()) s = DrainMemfd(dst, length);
    TrimMemfd(length);
    return s;
  }

  UringRegistrarStats stats() const {
    UringRegistrarStats st;
    st.registrations = registrations_.load(std::memory_order_relaxed);
    st.deregistrations = deregistrations_.load(std::memory_order_relaxed);
    st.unregistering = unregistering_.load(std::memory_order_relaxed);
    st.rings = UringRings::kCount;
    MutexLock lock(&slots_mu_);
    st.slots = slots_.size();
    st.live = slots_.size() - free_.size();
    return st;
  }

 private:
  struct Slot {
    void* addr = nullptr;
    size_t length = 0;
    unsigned ring = 0;  // the ring whose table holds the buffer
    bool live = false;
  };
  // A live slot's index and the ring its buffer is registered on.
  struct SlotOnRing {
    unsigned index;
    unsigned ring;
  };

  void ReleaseSlot(unsigned slot) {
    MutexLock lock(&slots_mu_);
    free_.push_back(slot);
  }

  // The slot `reg` occupies, or EINVAL if `reg` is not a live registration of
  // this registrar (never returned, or already deregistered). With `claim` the
  // slot stops being live at once, so two Deregisters cannot both win.
  absl::StatusOr<SlotOnRing> LiveSlot(const Registration& reg, bool claim = false) {
    MutexLock lock(&slots_mu_);
    if (reg.handle < slots_.size()) {
      Slot& s = slots_[reg.handle];
      if (s.live && s.addr == reg.addr && s.length == reg.length) {
        const SlotOnRing found{static_cast<unsigned>(reg.handle), s.ring};
        if (claim) s = Slot{};
        return found;
      }
    }
    return ErrnoStatus(EINVAL, absl::StrFormat("no live io_uring registration with handle %u "
                                               "for [%p, +%u)",
                                               reg.handle, reg.addr, reg.length));
  }

  absl::Status RegisterError(int err, void* addr, size_t length) const {
    std::string range = absl::StrFormat("[%p, +%u)", addr, length);
    if (err == EFAULT) {
      return ErrnoStatus(
          EFAULT, absl::StrCat("io_uring could not pin ", range, ": not mapped, or not writable"));
    }
    if (err == ENOMEM && memlock_accounted_) {
      return ErrnoStatus(ENOMEM,
                         absl::StrCat("pinning ", range, " would exceed RLIMIT_MEMLOCK (limit ",
                                      MemlockLimitText(),
                                      "; io_uring counts pinned pages against it "
                                      "without CAP_IPC_LOCK)"));
    }
    return ErrnoStatus(
        err, absl::StrCat("io_uring buffer registration of ", range, ": ", std::strerror(err)));
  }

  // Puts `length` bytes of `src` at offset 0 of the memfd. transfer_mu_ held.
  absl::Status FillMemfd(const void* src, size_t length) {
    const char* p = static_cast<const char*>(src);
    for (size_t done = 0; done < length;) {
      ssize_t n = pwrite(memfd_, p + done, length - done, static_cast<off_t>(done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno,
                           absl::StrCat("staging device data in memfd: ", std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // Reads `length` bytes at offset 0 of the memfd into `dst`. transfer_mu_ held.
  absl::Status DrainMemfd(void* dst, size_t length) {
    char* p = static_cast<char*>(dst);
    for (size_t done = 0; done < length;) {
      ssize_t n = pread(memfd_, p + done, length - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        return ErrnoStatus(err,
                           absl::StrCat("reading device data from memfd: ", std::strerror(err)));
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // Gives back the memfd's pages past kMemfdKeepBytes. A failure to shrink
  // only keeps pages that the next large transfer would use anyway.
  void TrimMemfd(size_t used) {
    if (static_cast<off_t>(used) <= kMemfdKeepBytes) return;
    const int shrunk = ftruncate(memfd_, kMemfdKeepBytes);
    (void)shrunk;
  }

  // Moves `length` bytes between the memfd (from offset 0) and `buf` inside
  // fixed buffer `slot`, on its ring: READ_FIXED (memfd -> buffer) if
  // into_buffer, else WRITE_FIXED (buffer -> memfd). Short transfers are
  // continued. transfer_mu_ held.
  absl::Status Transfer(SlotOnRing slot, char* buf, size_t length, bool into_buffer) {
    io_uring* ring = rings_.ring(slot.ring);
    for (size_t done = 0; done < length;) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) return ErrnoStatus(EBUSY, "io_uring submission queue is full");
      unsigned n = static_cast<unsigned>(length - done);
      if (into_buffer) {
        io_uring_prep_read_fixed(sqe, memfd_, buf + done, n, done, static_cast<int>(slot.index));
      } else {
        io_uring_prep_write_fixed(sqe, memfd_, buf + done, n, done, static_cast<int>(slot.index));
      }
      int rc = io_uring_submit(ring);
      if (rc != 1) {
        int err = rc < 0 ? -rc : EIO;
        return ErrnoStatus(err, absl::StrCat("io_uring_submit: ", std::strerror(err)));
      }
      io_uring_cqe* cqe = nullptr;
      do {
        rc = io_uring_wait_cqe(ring, &cqe);
      } while (rc == -EINTR);
      if (rc < 0) return ErrnoStatus(-rc, absl::StrCat("io_uring_wait_cqe: ", std::strerror(-rc)));
      int res = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      if (res <= 0) {
        int err = res < 0 ? -res : EIO;
        return ErrnoStatus(
            err, absl::StrFormat("io_uring %s through buffer slot %u moved %d "
                                 "of %u bytes: %s",
                                 into_buffer ? "READ_FIXED" : "WRITE_FIXED", slot.index, res,
                                 length - done, std::strerror(err)));
      }
      done += static_cast<size_t>(res);
    }
    return absl::OkStatus();
  }

  const bool memlock_accounted_;
  const int memfd_;
  const unsigned slot_count_;  // the fixed-buffer table's size (of every ring)
  // Serializes the rings' SQ/CQ use and the memfd's contents (transfers).
  Mutex transfer_mu_;
  UringRings rings_;

  mutable Mutex slots_mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(slots_mu_);
  std::vector<unsigned> free_ ABSL_GUARDED_BY(slots_mu_);

  std::atomic<uint64_t> registrations_{0};
  std::atomic<uint64_t> deregistrations_{0};
  std::atomic<uint64_t> unregistering_{0};  // Deregister calls in the kernel now
};

}  // namespace

bool UringAvailable() {
  static const bool available = [] {
    io_uring ring;
    if (SetUpUringRing(&ring, 1).err != 0) return false;
    io_uring_queue_exit(&ring);
    return true;
  }();
  return available;
}

absl::StatusOr<std::unique_ptr<Registrar>> MakeUringRegistrar(const Config& config) {
  if (config.uring_slots == 0 || config.uring_slots > kUringMaxSlots) {
    return ErrnoStatus(EINVAL, absl::StrCat("uring_slots must be 1..", kUringMaxSlots, ", not ",
                                            config.uring_slots));
  }
  int memfd = memfd_create("mrcache-uring-device", MFD_CLOEXEC);
  if (memfd < 0) {
    int err = errno;
    return ErrnoStatus(err, absl::StrCat("memfd_create: ", std::strerror(err)));
  }
  // Sampled before the ring exists, as the kernel samples it at creation.
  bool memlock_accounted = PinsCountAgainstMemlock();
  auto registrar = std::make_unique<UringRegistrar>(static_cast<unsigned>(config.uring_slots),
                                                    memlock_accounted, memfd);
  UringRings::Setup setup = registrar->Init();
  if (setup.err != 0) {
    std::string why = absl::StrCat(setup.step, " failed: ", std::strerror(setup.err));
    if (MeansUnavailable(setup.err)) {
      return ErrnoStatus(ENOTSUP,
                         absl::StrCat("io_uring fixed buffers are unavailable (", why, ")"));
    }
    return ErrnoStatus(setup.err, why);
  }
  return std::unique_ptr<Registrar>(std::move(registrar));
}

absl::optional<UringRegistrarStats> GetUringRegistrarStats(const Registrar& registrar) {
  const auto* uring = dynamic_cast<const UringRegistrar*>(&registrar);
  if (uring == nullptr) return absl::nullopt;
  return uring->stats();
}

absl::Status UringDeviceRead(Registrar& registrar, const Registration& reg, size_t offset,
                             void* dst, size_t length) {
  auto* uring = dynamic_cast<UringRegistrar*>(&registrar);
  if (uring == nullptr) {
    return ErrnoStatus(
        EINVAL, absl::StrCat("UringDeviceRead needs a uring registrar, not ", registrar.name()));
  }
  return uring->DeviceRead(reg, offset, dst, length);
}

}  // namespace mrcache
