// timed_registrar.h: a Registrar that forwards to another and records each
// register and deregister time by size class in RegistrarCosts.
#ifndef INTERPOSE_TIMED_REGISTRAR_H_
#define INTERPOSE_TIMED_REGISTRAR_H_

#include <memory>

#include "interpose/registrar_costs.h"
#include "mrcache/forwarding_registrar.h"

namespace mrcache_preload {

class TimedRegistrar : public mrcache::ForwardingRegistrar {
 public:
  // `costs` must outlive this registrar.
  TimedRegistrar(std::unique_ptr<mrcache::Registrar> inner, RegistrarCosts* costs)
      : ForwardingRegistrar(std::move(inner)), costs_(costs) {}

  // Forwards; a successful registration's time is recorded under its length.
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override;
  // Forwards; the time is recorded under reg.length.
  absl::Status Deregister(const mrcache::Registration& reg) override;

 private:
  RegistrarCosts* const costs_;
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_TIMED_REGISTRAR_H_
