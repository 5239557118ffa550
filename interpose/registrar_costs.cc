#include "interpose/registrar_costs.h"

#include <cmath>

namespace mrcache_preload {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

int RegistrarCosts::ClassOf(size_t length) {
  const size_t pages = length / kPageBytes + (length % kPageBytes != 0 ? 1 : 0);
  int c = 0;
  for (size_t p = pages; p > 1 && c < kClasses - 1; p >>= 1) ++c;
  return c;
}

void RegistrarCosts::AddRegistration(size_t length, uint64_t ns) {
  const int c = ClassOf(length);
  registrations_[c].fetch_add(1, kRelaxed);
  registrar_ns_[c].fetch_add(ns, kRelaxed);
}

void RegistrarCosts::AddDeregistration(size_t length, uint64_t ns) {
  registrar_ns_[ClassOf(length)].fetch_add(ns, kRelaxed);
}

bool RegistrarCosts::AddRequest(size_t length) {
  const uint64_t before = requests_[ClassOf(length)].fetch_add(1, kRelaxed);
  return before % kSampleEvery == 1;
}

void RegistrarCosts::AddSample(size_t length, uint64_t ns) {
  const int c = ClassOf(length);
  samples_[c].fetch_add(1, kRelaxed);
  sample_ns_[c].fetch_add(ns, kRelaxed);
}

double RegistrarCosts::ClassCostNs(const std::atomic<uint64_t>* count,
                                   const std::atomic<uint64_t>* ns, int c) {
  auto mean = [count, ns](int k) {
    return static_cast<double>(ns[k].load(kRelaxed)) / static_cast<double>(count[k].load(kRelaxed));
  };
  if (count[c].load(kRelaxed) != 0) return mean(c);
  for (int below = c - 1; below >= 0; --below) {
    if (count[below].load(kRelaxed) != 0) return mean(below);
  }
  for (int above = c + 1; above < kClasses; ++above) {
    if (count[above].load(kRelaxed) != 0) return std::ldexp(mean(above), c - above);
  }
  return 0;
}

RegistrarCosts::Estimate RegistrarCosts::EstimateUncached() const {
  Estimate e;
  for (int c = 0; c < kClasses; ++c) {
    e.measured_registrations += registrations_[c].load(kRelaxed);
    e.samples += samples_[c].load(kRelaxed);
  }
  // Samples when there are any; the cache's own (cold, dearer) registrations
  // otherwise.
  const bool sampled = e.samples != 0;
  const std::atomic<uint64_t>* count = sampled ? samples_ : registrations_;
  const std::atomic<uint64_t>* total = sampled ? sample_ns_ : registrar_ns_;
  double ns = 0;
  for (int c = 0; c < kClasses; ++c) {
    const uint64_t n = requests_[c].load(kRelaxed);
    if (n == 0) continue;
    e.requests += n;
    ns += static_cast<double>(n) * ClassCostNs(count, total, c);
  }
  e.uncached_ns = static_cast<uint64_t>(ns);
  return e;
}

}  // namespace mrcache_preload
