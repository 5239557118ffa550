#include "mrcache/registrars/rails_registrar.h"

#include <sched.h>

#include <cerrno>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/pin_budget.h"

namespace mrcache {
namespace {

// The rails the calling thread's next Register asks for (0: rail 0).
thread_local uint64_t asked_rails = 0;

// A region's registrations, one slot per rail (the invariants are in the
// header). Allocated by Register, freed by Deregister.
struct RailSet {
  explicit RailSet(int n) : rail(new Registration[n]) {}
  std::atomic<uint64_t> present{0};
  std::atomic<uint64_t> claimed{0};
  const std::unique_ptr<Registration[]> rail;
};

RailSet* SetOf(const Registration& reg) { return reinterpret_cast<RailSet*>(reg.handle); }

int LowestRail(uint64_t mask) { return __builtin_ctzll(mask); }

// `failed` (a rail's registrar error) with the rail named, errno kept.
absl::Status OnRail(int rail, const absl::Status& failed) {
  return ErrnoStatus(StatusToErrno(failed), absl::StrCat("rail ", rail, ": ", failed.message()));
}

}  // namespace

RailsRegistrar::AskScope::AskScope(uint64_t rails) : outer_(asked_rails) { asked_rails = rails; }
RailsRegistrar::AskScope::~AskScope() { asked_rails = outer_; }

absl::StatusOr<std::unique_ptr<RailsRegistrar>> RailsRegistrar::Create(
    std::vector<std::unique_ptr<Registrar>> rails) {
  if (rails.empty() || rails.size() > kMaxRails) {
    return ErrnoStatus(EINVAL, absl::StrCat("rails: between 1 and ", kMaxRails,
                                            " rails are needed, not ", rails.size()));
  }
  for (const auto& r : rails) {
    if (r == nullptr) return ErrnoStatus(EINVAL, "rails: a rail has no registrar");
  }
  const bool pins = rails[0]->pins_memory();
  return std::unique_ptr<RailsRegistrar>(new RailsRegistrar(std::move(rails), pins));
}

RailsRegistrar::RailsRegistrar(std::vector<std::unique_ptr<Registrar>> rails, bool pins)
    : rails_(std::move(rails)), pins_(pins), counters_(new Counters[rails_.size()]) {}

RailsRegistrar::~RailsRegistrar() = default;

uint64_t RailsRegistrar::all_rails() const {
  return rail_count() == kMaxRails ? ~uint64_t{0} : (uint64_t{1} << rail_count()) - 1;
}

std::string RailsRegistrar::rail() const {
  std::string names;
  for (const auto& r : rails_) absl::StrAppend(&names, names.empty() ? "" : "+", r->rail());
  return names;
}

absl::StatusOr<Registration> RailsRegistrar::RegisterOn(int rail, void* addr, size_t length,
                                                        int access) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<Registration> reg = rails_[rail]->Register(addr, length, access);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  Counters& c = counters_[rail];
  c.registrar_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  if (reg.ok()) {
    c.registrations.fetch_add(1, std::memory_order_relaxed);
    c.registered_bytes.fetch_add(length, std::memory_order_relaxed);
    const uint64_t now = registered_bytes_.fetch_add(length, std::memory_order_relaxed) + length;
    uint64_t peak = peak_registered_bytes_.load(std::memory_order_relaxed);
    while (now > peak && !peak_registered_bytes_.compare_exchange_weak(
                             peak, now, std::memory_order_relaxed, std::memory_order_relaxed)) {
    }
  }
  return reg;
}

absl::Status RailsRegistrar::DeregisterOn(int rail, const Registration& reg) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = rails_[rail]->Deregister(reg);
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  Counters& c = counters_[rail];
  c.registrar_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  c.deregistrations.fetch_add(1, std::memory_order_relaxed);
  c.registered_bytes.fetch_sub(reg.length, std::memory_order_relaxed);
  registered_bytes_.fetch_sub(reg.length, std::memory_order_relaxed);
  return s;
}

void RailsRegistrar::ChargeExtraRails(int64_t count, size_t length, int access) {
  if (!pins_ || count == 0 || (access & kAccessOnDemand)) return;
  PinBudget& budget = PinBudget::Process();
  if (count > 0) {
    budget.AddPinned(static_cast<size_t>(count) * length);
  } else {
    budget.SubPinned(static_cast<size_t>(-count) * length);
  }
}

absl::StatusOr<Registration> RailsRegistrar::Register(void* addr, size_t length, int access) {
  const uint64_t asked = (asked_rails != 0 ? asked_rails : 1) & all_rails();
  auto set = std::make_unique<RailSet>(rail_count());
  for (uint64_t todo = asked; todo != 0; todo &= todo - 1) {
    const int rail = LowestRail(todo);
    absl::StatusOr<Registration> reg = RegisterOn(rail, addr, length, access);
    if (!reg.ok()) {
      for (uint64_t done = asked & ((uint64_t{1} << rail) - 1); done != 0; done &= done - 1) {
        (void)DeregisterOn(LowestRail(done), set->rail[LowestRail(done)]);
      }
      return OnRail(rail, reg.status());
    }
    set->rail[rail] = *reg;
  }
  set->claimed.store(asked, std::memory_order_relaxed);
  set->present.store(asked, std::memory_order_release);
  ChargeExtraRails(__builtin_popcountll(asked) - 1, length, access);
  Registration region;
  region.addr = addr;
  region.length = length;
  region.access = access;
  region.rails = true;
  region.handle = reinterpret_cast<uint64_t>(set.release());
  return region;
}

absl::Status RailsRegistrar::Deregister(const Registration& reg) {
  std::unique_ptr<RailSet> set(SetOf(reg));
  const uint64_t present = set->present.load(std::memory_order_acquire);
  absl::Status first;
  for (uint64_t todo = present; todo != 0; todo &= todo - 1) {
    const int rail = LowestRail(todo);
    absl::Status s = DeregisterOn(rail, set->rail[rail]);
    if (!s.ok() && first.ok()) first = s;
  }
  ChargeExtraRails(-(__builtin_popcountll(present) - 1), reg.length, reg.access);
  return first;
}

absl::Status RailsRegistrar::DeviceWrite(const Registration& reg, size_t offset, const void* src,
                                         size_t length) {
  const RailSet* set = SetOf(reg);
  const int rail = LowestRail(set->present.load(std::memory_order_acquire));
  return rails_[rail]->DeviceWrite(set->rail[rail], offset, src, length);
}

uint64_t RailsRegistrar::Present(const Registration& reg) {
  return SetOf(reg)->present.load(std::memory_order_acquire);
}

absl::Status RailsRegistrar::Complete(const Registration& reg, uint64_t rails) {
  RailSet* set = SetOf(reg);
  rails &= all_rails();
  for (;;) {
    const uint64_t missing = rails & ~set->present.load(std::memory_order_acquire);
    if (missing == 0) return absl::OkStatus();
    const int rail = LowestRail(missing);
    const uint64_t bit = uint64_t{1} << rail;
    if (set->claimed.fetch_or(bit, std::memory_order_acq_rel) & bit) {
      // Another holder is registering this rail: wait for its outcome (it
      // publishes the rail or releases the claim), then look again.
      while ((set->present.load(std::memory_order_acquire) & bit) == 0 &&
             (set->claimed.load(std::memory_order_acquire) & bit) != 0) {
        sched_yield();
      }
      continue;
    }
    absl::StatusOr<Registration> r = RegisterOn(rail, reg.addr, reg.length, reg.access);
    if (!r.ok()) {
      set->claimed.fetch_and(~bit, std::memory_order_release);
      return OnRail(rail, r.status());
    }
    set->rail[rail] = *r;
    ChargeExtraRails(1, reg.length, reg.access);
    set->present.fetch_or(bit, std::memory_order_release);
  }
}

absl::StatusOr<Registration> RailsRegistrar::RailRegistration(const Registration& reg, int rail) {
  if (rail < 0 || rail >= kMaxRails) {
    return ErrnoStatus(EINVAL,
                       absl::StrCat("rail ", rail, " is not between 0 and ", kMaxRails - 1));
  }
  const RailSet* set = SetOf(reg);
  if ((set->present.load(std::memory_order_acquire) & (uint64_t{1} << rail)) == 0) {
    return ErrnoStatus(ENOENT, absl::StrCat("the region is not registered on rail ", rail));
  }
  return set->rail[rail];
}

size_t RailsRegistrar::max_region_bytes() const {
  size_t shortest = 0;
  for (const auto& r : rails_) {
    const size_t limit = r->max_region_bytes();
    if (limit != 0 && (shortest == 0 || limit < shortest)) shortest = limit;
  }
  return shortest;
}

RailStats RailsRegistrar::stats(int rail) const {
  const Counters& c = counters_[rail];
  RailStats s;
  // Deregistrations first: each follows its registration, so regions (the
  // difference) is never negative.
  s.deregistrations = c.deregistrations.load(std::memory_order_relaxed);
  s.registrations = c.registrations.load(std::memory_order_relaxed);
  s.regions = s.registrations - s.deregistrations;
  s.registered_bytes = c.registered_bytes.load(std::memory_order_relaxed);
  s.registrar_ns = c.registrar_ns.load(std::memory_order_relaxed);
  return s;
}

uint64_t RailsRegistrar::registered_bytes() const {
  return registered_bytes_.load(std::memory_order_relaxed);
}

uint64_t RailsRegistrar::peak_registered_bytes() const {
  return peak_registered_bytes_.load(std::memory_order_relaxed);
}

}  // namespace mrcache
