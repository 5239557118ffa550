// forwarding_registrar.h: the base of Registrar decorators (timing, counting):
// every call goes to the wrapped registrar; a decorator overrides the calls it
// observes and calls ForwardingRegistrar's version (or inner()) to pass them on.
#ifndef MRCACHE_FORWARDING_REGISTRAR_H_
#define MRCACHE_FORWARDING_REGISTRAR_H_

#include <memory>
#include <utility>

#include "mrcache/registrar.h"

namespace mrcache {

class ForwardingRegistrar : public Registrar {
 public:
  explicit ForwardingRegistrar(std::unique_ptr<Registrar> inner) : inner_(std::move(inner)) {}

  const char* name() const override { return inner_->name(); }
  std::string rail() const override { return inner_->rail(); }
  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    return inner_->Register(addr, length, access);
  }
  absl::Status Deregister(const Registration& reg) override { return inner_->Deregister(reg); }
  absl::Status DeviceWrite(const Registration& reg, size_t offset, const void* src,
                           size_t length) override {
    return inner_->DeviceWrite(reg, offset, src, length);
  }
  OdpCapabilities odp_capabilities() const override { return inner_->odp_capabilities(); }
  bool pins_memory() const override { return inner_->pins_memory(); }
  size_t max_region_bytes() const override { return inner_->max_region_bytes(); }
  absl::Status Prefetch(const Registration& reg, void* addr, size_t length) override {
    return inner_->Prefetch(reg, addr, length);
  }

 protected:
  Registrar& inner() { return *inner_; }

 private:
  const std::unique_ptr<Registrar> inner_;
};

}  // namespace mrcache

#endif  // MRCACHE_FORWARDING_REGISTRAR_H_
