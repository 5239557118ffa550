// sim_registrar.cc: see sim_registrar.h for the contract.
#include "mrcache/registrars/sim_registrar.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/mutex.h"
#include "mrcache/registrars/registration_checks.h"

namespace mrcache {
namespace {

uint64_t SaturatingMulAdd(uint64_t base, uint64_t per, uint64_t n) {
  uint64_t product;
  if (__builtin_mul_overflow(per, n, &product)) return UINT64_MAX;
  uint64_t sum;
  if (__builtin_add_overflow(base, product, &sum)) return UINT64_MAX;
  return sum;
}

// Burns `ns` nanoseconds of CPU, the way a registration syscall would.
void Spin(uint64_t ns) {
  if (ns == 0) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < deadline) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

bool IsImplicitOdp(const void* addr, size_t length, int access) {
  return addr == nullptr && length == SIZE_MAX && (access & kAccessOnDemand);
}

// mlock/munlock as raw system calls: the sanitizers' interceptors turn the
// libc functions into no-ops, and the pins must be real in every build.
int LockPages(uintptr_t first_page, uintptr_t end_page, size_t page) {
  return static_cast<int>(syscall(SYS_mlock, first_page * page, (end_page - first_page) * page));
}
void UnlockPages(uintptr_t first_page, uintptr_t end_page, size_t page) {
  // Fails (ENOMEM) if the memory is gone already; nothing is locked then.
  (void)syscall(SYS_munlock, first_page * page, (end_page - first_page) * page);
}

// Page-granular mlock reference counts: a page is mlock()ed while at least one
// registration covers it.
class PinCounts {
 public:
  explicit PinCounts(size_t page) : page_(page) {}

  absl::Status Pin(const void* addr, size_t length) {
    auto [first, last] = PageRange(addr, length);
    MutexLock lock(&mu_);
    // Lock the runs of pages nobody pins yet; undo them all if one fails.
    std::vector<std::pair<uintptr_t, uintptr_t>> locked;
    for (uintptr_t p = first; p < last;) {
      if (counts_.contains(p)) {
        ++p;
        continue;
      }
      uintptr_t run_end = p + 1;
      while (run_end < last && !counts_.contains(run_end)) ++run_end;
      if (LockPages(p, run_end, page_) != 0) {
        int err = errno;
        for (const auto& [b, e] : locked) UnlockPages(b, e, page_);
        return MlockError(err, addr, length);
      }
      locked.emplace_back(p, run_end);
      p = run_end;
    }
    for (uintptr_t p = first; p < last; ++p) ++counts_[p];
    return absl::OkStatus();
  }

  void Unpin(const void* addr, size_t length) {
    auto [first, last] = PageRange(addr, length);
    MutexLock lock(&mu_);
    uintptr_t run_start = 0, run_end = 0;  // pages to munlock, merged
    auto flush = [&] {
      if (run_end > run_start) UnlockPages(run_start, run_end, page_);
    };
    for (uintptr_t p = first; p < last; ++p) {
      auto it = counts_.find(p);
      if (it == counts_.end() || --it->second != 0) continue;
      counts_.erase(it);
      if (p != run_end) {
        flush();
        run_start = p;
      }
      run_end = p + 1;
    }
    flush();
  }

  uint64_t pinned_pages() const {
    MutexLock lock(&mu_);
    return counts_.size();
  }

 private:
  std::pair<uintptr_t, uintptr_t> PageRange(const void* addr, size_t length) const {
    uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    return {a / page_, (a + length + page_ - 1) / page_};
  }

  static absl::Status MlockError(int err, const void* addr, size_t length) {
    std::string range = absl::StrFormat("[%p, +%u)", addr, length);
    if (err == ENOMEM || err == EPERM) {
      return ErrnoStatus(ENOMEM,
                         absl::StrCat("mlock of ", range, " would exceed RLIMIT_MEMLOCK (limit ",
                                      MemlockLimitText(), ")"));
    }
    return ErrnoStatus(err, absl::StrCat("mlock of ", range, ": ", std::strerror(err)));
  }

  const size_t page_;
  mutable Mutex mu_;
  absl::flat_hash_map<uintptr_t, uint32_t> counts_ ABSL_GUARDED_BY(mu_);  // page -> pins
};

class SimRegistrar final : public Registrar {
 public:
  explicit SimRegistrar(const Config& config)
      : base_ns_(config.sim_base_ns),
        page_ns_(config.sim_page_ns),
        odp_page_ns_(config.sim_odp_page_ns),
        mlock_(config.sim_mlock),
        pins_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

  ~SimRegistrar() override {
    MutexLock lock(&mu_);
    for (const auto& [handle, live] : live_) {
      if (live.mlocked) pins_.Unpin(live.addr, live.length);
    }
  }

  const char* name() const override { return "sim"; }
  // Only sim_mlock pins (with mlock, charged to RLIMIT_MEMLOCK per process).
  bool pins_memory() const override { return mlock_; }

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    const bool odp = (access & kAccessOnDemand) != 0;
    if (IsImplicitOdp(addr, length, access)) {
      if (absl::Status s = ValidateAccess(access); !s.ok()) return s;
    } else {
      if (absl::Status s = CheckRegisterArgs(addr, length, access); !s.ok()) return s;
      if (!odp) {
        if (absl::Status s = CheckMapped(addr, length); !s.ok()) return s;
      }
    }
    const bool mlocked = mlock_ && !odp;
    if (mlocked) {
      if (absl::Status s = pins_.Pin(addr, length); !s.ok()) return s;
    }
    uint64_t cost =
        odp ? base_ns_ : SaturatingMulAdd(base_ns_, page_ns_, PagesSpanned(addr, length));
    Spin(cost);

    uint64_t handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
    while (static_cast<uint32_t>(handle) == 0) {
      handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
    }
    Live live;
    live.addr = addr;
    live.length = length;
    live.odp = odp;
    live.mlocked = mlocked;
    if (odp) live.touched = std::make_unique<absl::flat_hash_set<uintptr_t>>();
    {
      MutexLock lock(&mu_);
      live_.emplace(handle, std::move(live));
      ++registrations_;
      simulated_ns_ += cost;
    }
    Registration reg;
    reg.addr = addr;
    reg.length = length;
    reg.access = access;
    reg.handle = handle;
    reg.lkey = reg.rkey = static_cast<uint32_t>(handle);
    return reg;
  }

  absl::Status Deregister(const Registration& reg) override {
    Live live;
    {
      MutexLock lock(&mu_);
      auto it = FindLive(reg);
      if (it == live_.end()) return NotLive(reg);
      live = std::move(it->second);
      live_.erase(it);
      ++deregistrations_;
      simulated_ns_ += base_ns_ / 2;
    }
    if (live.mlocked) pins_.Unpin(live.addr, live.length);
    Spin(base_ns_ / 2);
    return absl::OkStatus();
  }

  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    if (absl::Status s = CheckDeviceRange(reg, offset, length); !s.ok()) return s;
    void* dst = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(reg.addr) + offset);
    if (absl::Status s = Touch(reg, dst, length); !s.ok()) return s;
    if (length != 0) std::memcpy(dst, src, length);
    return absl::OkStatus();
  }

  OdpCapabilities odp_capabilities() const override {
    OdpCapabilities caps;
    caps.explicit_odp = caps.implicit_odp = caps.prefetch = true;
    return caps;
  }

  absl::Status Prefetch(const Registration& reg, void* addr, size_t length) override {
    if (!(reg.access & kAccessOnDemand)) {
      return ErrnoStatus(EINVAL, "prefetch needs an on-demand (IBV_ACCESS_ON_DEMAND) registration");
    }
    uintptr_t a = reinterpret_cast<uintptr_t>(addr), base = reinterpret_cast<uintptr_t>(reg.addr);
    if (a < base) {
      return ErrnoStatus(EINVAL, absl::StrFormat("prefetch at %p starts before the registration "
                                                 "at %p",
                                                 addr, reg.addr));
    }
    if (absl::Status s = CheckDeviceRange(reg, a - base, length); !s.ok()) return s;
    return Touch(reg, addr, length);
  }

  SimRegistrarStats stats() const {
    SimRegistrarStats st;
    {
      MutexLock lock(&mu_);
      st.registrations = registrations_;
      st.deregistrations = deregistrations_;
      st.live = live_.size();
      st.simulated_ns = simulated_ns_;
      st.odp_faulted_pages = odp_faulted_pages_;
    }
    st.mlocked_pages = pins_.pinned_pages();
    return st;
  }

 private:
  struct Live {
    void* addr = nullptr;
    size_t length = 0;
    bool odp = false;
    bool mlocked = false;
    // ODP: the 4 KiB pages a device access has faulted in so far.
    std::unique_ptr<absl::flat_hash_set<uintptr_t>> touched;
  };
  using LiveMap = absl::flat_hash_map<uint64_t, Live>;

  // The live entry `reg` names, or live_.end().
  LiveMap::iterator FindLive(const Registration& reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = live_.find(reg.handle);
    if (it == live_.end() || it->second.addr != reg.addr || it->second.length != reg.length) {
      return live_.end();
    }
    return it;
  }

  static absl::Status NotLive(const Registration& reg) {
    return ErrnoStatus(EINVAL, absl::StrFormat("no live sim registration with handle %u for "
                                               "[%p, +%u)",
                                               reg.handle, reg.addr, reg.length));
  }

  // A device access to [addr, addr + length) inside live registration `reg`:
  // EFAULT if the memory is not mapped; for ODP, charges the pages touched for
  // the first time.
  absl::Status Touch(const Registration& reg, void* addr, size_t length) {
    uint64_t faulted = 0;
    {
      MutexLock lock(&mu_);
      auto it = FindLive(reg);
      if (it == live_.end()) return NotLive(reg);
      if (absl::Status s = CheckMapped(addr, length); !s.ok()) return s;
      if (it->second.odp && length != 0) {
        uintptr_t first = reinterpret_cast<uintptr_t>(addr) / kSmallPage;
        uintptr_t count = PagesSpanned(addr, length);
        for (uintptr_t p = first; p < first + count; ++p)
          faulted += it->second.touched->insert(p).second;
        odp_faulted_pages_ += faulted;
        simulated_ns_ += faulted * odp_page_ns_;
      }
    }
    Spin(faulted * odp_page_ns_);
    return absl::OkStatus();
  }

  const uint64_t base_ns_;
  const uint64_t page_ns_;
  const uint64_t odp_page_ns_;
  const bool mlock_;
  PinCounts pins_;
  std::atomic<uint64_t> next_handle_{1};

  mutable Mutex mu_;
  LiveMap live_ ABSL_GUARDED_BY(mu_);
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t deregistrations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t simulated_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t odp_faulted_pages_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Registrar> MakeSimRegistrar(const Config& config) {
  return std::make_unique<SimRegistrar>(config);
}

absl::optional<SimRegistrarStats> GetSimRegistrarStats(const Registrar& registrar) {
  const auto* sim = dynamic_cast<const SimRegistrar*>(&registrar);
  if (sim == nullptr) return absl::nullopt;
  return sim->stats();
}

}  // namespace mrcache
