#include "interpose/timed_registrar.h"

#include <chrono>

namespace mrcache_preload {
namespace {

uint64_t NsSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
}

}  // namespace

absl::StatusOr<mrcache::Registration> TimedRegistrar::Register(void* addr, size_t length,
                                                               int access) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<mrcache::Registration> reg = inner().Register(addr, length, access);
  if (reg.ok()) costs_->AddRegistration(reg->length, NsSince(start));
  return reg;
}

absl::Status TimedRegistrar::Deregister(const mrcache::Registration& reg) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = inner().Deregister(reg);
  costs_->AddDeregistration(reg.length, NsSince(start));
  return s;
}

}  // namespace mrcache_preload
