// timed_registrar.h: a Registrar that forwards to another and records each
// register and deregister time by size class in RegistrarCosts.
#ifndef INTERPOSE_TIMED_REGISTRAR_H_
#define INTERPOSE_TIMED_REGISTRAR_H_

#include <memory>

#include "interpose/registrar_costs.h"
#include "mrcache/registrar.h"

namespace mrcache_preload {

class TimedRegistrar : public mrcache::Registrar {
 public:
  // `costs` must outlive this registrar.
  TimedRegistrar(std::unique_ptr<mrcache::Registrar> inner, RegistrarCosts* costs)
      : inner_(std::move(inner)), costs_(costs) {}

  const char* name() const override { return inner_->name(); }
  // Forwards; a successful registration's time is recorded under its length.
  absl::StatusOr<mrcache::Registration> Register(void* addr, size_t length, int access) override;
  // Forwards; the time is recorded under reg.length.
  absl::Status Deregister(const mrcache::Registration& reg) override;
  absl::Status DeviceWrite(const mrcache::Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    return inner_->DeviceWrite(reg, offset, src, length);
  }
  mrcache::OdpCapabilities odp_capabilities() const override { return inner_->odp_capabilities(); }
  absl::Status Prefetch(const mrcache::Registration& reg, void* addr, size_t length) override {
    return inner_->Prefetch(reg, addr, length);
  }

 private:
  const std::unique_ptr<mrcache::Registrar> inner_;
  RegistrarCosts* const costs_;
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_TIMED_REGISTRAR_H_
