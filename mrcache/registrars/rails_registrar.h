// rails_registrar.h: one registrar over several protection domains (rails:
// one PD per NIC), registering each region lazily on the rails its gets ask
// for.
//
// A RailsRegistrar holds one Registrar per rail (index 0..rail_count()-1).
// The Registration it returns for a region has `rails` set and its handle
// points at the region's RailSet: one Registration per rail and the bitmask
// of rails it is registered on. lkey and rkey of that Registration are 0: the
// keys are per rail (RailRegistration).
//
// Which rails a Register call registers: the ones the calling thread asked
// for with an AskScope around its get (Cache::AcquireRails), rail 0 when it
// asked none. A region the cache merged, bridged or re-registered therefore
// comes back on the rails of the get that made it, not on the union of the
// rails of the regions it replaced: those are added lazily by the gets that
// ask for them (Complete).
//
// Invariants of a RailSet:
//  - `present` never loses a bit while the region is registered, and every
//    bit of it names a published Registration in rail[] (release/acquire);
//  - a rail's bit is set in `claimed` by exactly one thread at a time, the
//    one registering it; it is set in `present` once that succeeds and
//    cleared from `claimed` if it fails;
//  - Register leaves at least one rail present, so a region always pins
//    (present count) x length bytes, of which the cache charges length and
//    this registrar the rest to the process's pin budget (pin_budget.h);
//  - Deregister runs once no holder is left (the cache's reference rule),
//    hence never beside Complete, and deregisters every present rail.
//
// Thread-safe.
#ifndef MRCACHE_REGISTRARS_RAILS_REGISTRAR_H_
#define MRCACHE_REGISTRARS_RAILS_REGISTRAR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "mrcache/registrar.h"

namespace mrcache {

// The most rails one cache spans (one bit each in a uint64_t mask).
constexpr int kMaxRails = 64;

// Counters of one rail (mrc_rail_stats_t has the same fields and meaning).
struct RailStats {
  uint64_t registrations = 0;     // registrations made on this rail
  uint64_t deregistrations = 0;   // of those, deregistered
  uint64_t regions = 0;           // registered on this rail now
  uint64_t registered_bytes = 0;  // bytes registered on this rail now
  uint64_t registrar_ns = 0;      // time spent in this rail's registrar calls
};

class RailsRegistrar : public Registrar {
 public:
  // Sets the rails the calling thread's Register calls register while it
  // lives (nested scopes restore the outer one).
  class AskScope {
   public:
    explicit AskScope(uint64_t rails);
    ~AskScope();
    AskScope(const AskScope&) = delete;
    AskScope& operator=(const AskScope&) = delete;

   private:
    const uint64_t outer_;
  };

  // A registrar over `rails` (1..kMaxRails non-null registrars of one kind;
  // EINVAL otherwise). Registrations of rails beyond a region's first are
  // charged to the process's pin budget when the rails pin memory.
  static absl::StatusOr<std::unique_ptr<RailsRegistrar>> Create(
      std::vector<std::unique_ptr<Registrar>> rails);
  ~RailsRegistrar() override;

  int rail_count() const { return static_cast<int>(rails_.size()); }
  // The mask of every rail: bits 0..rail_count()-1.
  uint64_t all_rails() const;

  // Rail 0's name ("verbs", "custom", ...).
  const char* name() const override { return rails_[0]->name(); }
  // The rails' names joined with '+', e.g. "mlx5_0+mlx5_1".
  std::string rail() const override;
  bool pins_memory() const override { return pins_; }
  OdpCapabilities odp_capabilities() const override { return {}; }
  // The shortest of the rails' limits (0 = none has one): a region is
  // registered whole on every rail it is asked for.
  size_t max_region_bytes() const override;

  // Registers [addr, addr + length) on the rails the calling thread asked
  // for (AskScope; rail 0 if none). A failure on one rail deregisters the
  // rails already done and returns that rail's error.
  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override;
  // Deregisters every rail the region is on; returns the first error.
  absl::Status Deregister(const Registration& reg) override;
  // Through the lowest rail the region is on.
  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override;

  // The rails `reg` (one of this registrar's) is registered on now.
  static uint64_t Present(const Registration& reg);
  // Registers `reg`'s range on each rail of `rails` it is not on yet, the
  // caller holding a reference to its region. A rail another thread is
  // registering meanwhile is waited for, not registered twice. On a failure
  // the rails done stay (the region is still valid on them) and the error
  // of the failed rail is returned.
  absl::Status Complete(const Registration& reg, uint64_t rails);
  // Rail `rail`'s registration of a region registered by any
  // RailsRegistrar: ENOENT if the region is not registered on that rail.
  static absl::StatusOr<Registration> RailRegistration(const Registration& reg, int rail);

  // Counters of rail `rail` (0 <= rail < rail_count()).
  RailStats stats(int rail) const;
  // The device (verbs) or registrar name of rail `rail` (0 <= rail < rail_count()).
  std::string rail_name(int rail) const { return rails_[rail]->rail(); }
  // Bytes registered now over every rail (a region counts once per rail it
  // is on: each rail's registration pins), and the most there ever were.
  uint64_t registered_bytes() const;
  uint64_t peak_registered_bytes() const;

 private:
  struct Counters {
    std::atomic<uint64_t> registrations{0}, deregistrations{0}, registered_bytes{0},
        registrar_ns{0};
  };
  RailsRegistrar(std::vector<std::unique_ptr<Registrar>> rails, bool pins);

  absl::StatusOr<Registration> RegisterOn(int rail, void* addr, size_t length, int access);
  absl::Status DeregisterOn(int rail, const Registration& reg);
  // Charges (or, negative, refunds) `count` extra rail registrations of
  // `length` bytes to the process's pin budget.
  void ChargeExtraRails(int64_t count, size_t length, int access);

  const std::vector<std::unique_ptr<Registrar>> rails_;
  const bool pins_;
  std::unique_ptr<Counters[]> counters_;
  // The sum of the rails' registered_bytes, and its highest value.
  std::atomic<uint64_t> registered_bytes_{0}, peak_registered_bytes_{0};
};

}  // namespace mrcache

#endif  // MRCACHE_REGISTRARS_RAILS_REGISTRAR_H_
