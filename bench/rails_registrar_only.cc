#include "bench/rails_registrar_only.h"

#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/bench_registrar.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrar.h"

namespace mrbench {
namespace {

constexpr int kAccess = mrcache::kAccessLocalWrite;

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Registers [p, p + bytes) on `r`, adding the call's time to *seconds.
absl::StatusOr<mrcache::Registration> TimedRegister(mrcache::Registrar& r, char* p, size_t bytes,
                                                    double* seconds) {
  const auto t0 = Clock::now();
  absl::StatusOr<mrcache::Registration> reg = r.Register(p, bytes, kAccess);
  *seconds += Since(t0);
  return reg;
}

absl::Status TimedDeregister(mrcache::Registrar& r, const mrcache::Registration& reg,
                             double* seconds) {
  const auto t0 = Clock::now();
  absl::Status s = r.Deregister(reg);
  *seconds += Since(t0);
  return s;
}

// One buffer's registrations and deregistrations (the header's order), then
// its munmap. On a failure every registration made is deregistered and the
// buffer unmapped before returning.
absl::Status TimeOneBuffer(std::vector<std::unique_ptr<mrcache::Registrar>>& rails, char* p,
                           size_t bytes, RegistrarOnlyTimes* t) {
  std::vector<mrcache::Registration> regs;
  absl::Status failed;
  for (size_t rail = 0; rail < rails.size() && failed.ok(); ++rail) {
    auto reg = TimedRegister(*rails[rail], p, bytes, rail == 0 ? &t->first_s : &t->added_s);
    if (reg.ok()) {
      regs.push_back(*reg);
    } else {
      failed = reg.status();
    }
  }
  // The rails above the first, then the first: its deregistration unpins last.
  for (size_t rail = regs.size(); rail-- > 0;) {
    absl::Status s =
        TimedDeregister(*rails[rail], regs[rail], rail == 0 ? &t->last_dereg_s : &t->other_dereg_s);
    if (failed.ok()) failed = s;
  }
  if (!failed.ok()) {
    munmap(p, bytes);
    return failed;
  }
  auto again = TimedRegister(*rails[0], p, bytes, &t->again_s);
  if (!again.ok()) {
    munmap(p, bytes);
    return again.status();
  }
  munmap(p, bytes);  // the pin keeps the pages until the deregistration
  return TimedDeregister(*rails[0], *again, &t->unmapped_dereg_s);
}

}  // namespace

absl::StatusOr<RegistrarOnlyTimes> TimeRegistrarOnly(const mrcache::Config& base, int rails,
                                                     const std::vector<size_t>& sizes) {
  if (rails < 1 || rails > 64) {
    return mrcache::ErrnoStatus(EINVAL,
                                absl::StrCat("registrar-only: ", rails, " rails is not in 1..64"));
  }
  auto registrars = MakeBenchRailRegistrars(base, rails);
  if (!registrars.ok()) return registrars.status();
  RegistrarOnlyTimes t;
  for (size_t bytes : sizes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return mrcache::ErrnoStatus(errno, "registrar-only: mmap of a buffer");
    std::memset(p, static_cast<int>(t.buffers), bytes);  // the application fills it
    absl::Status s = TimeOneBuffer(*registrars, static_cast<char*>(p), bytes, &t);
    if (!s.ok()) return s;
    ++t.buffers;
  }
  return t;
}

}  // namespace mrbench
