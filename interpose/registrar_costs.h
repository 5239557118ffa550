// registrar_costs.h: what registering costs, per size class, measured in this
// run -- the basis of the shim's "registrar time saved" estimate.
//
// Without the cache, every request the cache served would have been one
// ibv_reg_mr + ibv_dereg_mr of exactly the requested bytes. Requests are
// binned by size class (floor(log2(pages))). Every kSampleEvery-th request of
// a class (from its 2nd on) is sampled: the shim registers and deregisters
// exactly the requested bytes once more, outside the cache, and times it.
// That is the very operation the cache avoided, in the same conditions (the
// pages resident, the device warm), so a class's price is the mean of its
// samples. The cache's own registrations are a biased sample -- each is the
// first registration of its memory, which faults and pins cold pages, several
// times dearer than registering the same buffer again -- and are used only
// when no request was sampled at all.
//
// A class without samples takes the nearest smaller sampled class's price,
// else the nearest larger one's scaled down by the page ratio. Registration
// cost is a fixed part plus a part per page (both >= 0), so for p < q pages
// cost(p) >= cost(q) * p / q and cost(q) >= cost(p): both fill-ins can only
// underestimate.
#ifndef INTERPOSE_REGISTRAR_COSTS_H_
#define INTERPOSE_REGISTRAR_COSTS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mrcache_preload {

class RegistrarCosts {
 public:
  // Classes 0 .. kClasses-1 hold 1 page .. 2^(kClasses-1) pages and more.
  static constexpr int kClasses = 40;
  static constexpr size_t kPageBytes = 4096;

  // floor(log2(ceil(length / 4 KiB))), 0 for length <= 4 KiB, capped at kClasses-1.
  static int ClassOf(size_t length);

  // A registration of `length` bytes that took `ns`.
  void AddRegistration(size_t length, uint64_t ns);
  // The deregistration of a registration of `length` bytes, which took `ns`.
  void AddDeregistration(size_t length, uint64_t ns);
  // A request of `length` bytes the cache served (hit or miss). True if the
  // caller should time one registration+deregistration of it (AddSample).
  bool AddRequest(size_t length);
  // One registration+deregistration of exactly `length` requested bytes,
  // made only to time it, which took `ns`.
  void AddSample(size_t length, uint64_t ns);
  static constexpr uint64_t kSampleEvery = 64;

  struct Estimate {
    uint64_t requests = 0;                // requests served
    uint64_t samples = 0;                 // requests registered again to time them
    uint64_t measured_registrations = 0;  // the cache's own registrations timed
    uint64_t uncached_ns = 0;             // what registering each request would have cost
  };
  // Thread-safe; concurrent updates may or may not be included.
  Estimate EstimateUncached() const;

 private:
  // Mean ns of class `c` among (count, ns) pairs, filled in as the header
  // says; 0 if no class has a measurement.
  static double ClassCostNs(const std::atomic<uint64_t>* count, const std::atomic<uint64_t>* ns,
                            int c);

  std::atomic<uint64_t> registrations_[kClasses] = {};
  std::atomic<uint64_t> registrar_ns_[kClasses] = {};
  std::atomic<uint64_t> requests_[kClasses] = {};
  std::atomic<uint64_t> samples_[kClasses] = {};
  std::atomic<uint64_t> sample_ns_[kClasses] = {};
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_REGISTRAR_COSTS_H_
