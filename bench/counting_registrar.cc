#include "bench/counting_registrar.h"

#include <time.h>

namespace mrbench {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

bool CountingRegistrar::CountTime(uint64_t start) {
  const bool background = std::this_thread::get_id() != workload_thread_;
  std::atomic<uint64_t>& counter =
      background ? counters_->background_registrar_ns : counters_->registrar_ns;
  counter.fetch_add(NowNs() - start, std::memory_order_relaxed);
  return background;
}

absl::StatusOr<mrcache::Registration> CountingRegistrar::Register(void* addr, size_t length,
                                                                  int access) {
  const uint64_t start = NowNs();
  absl::StatusOr<mrcache::Registration> reg = inner().Register(addr, length, access);
  CountTime(start);
  if (!reg.ok()) return reg;
  counters_->registrations.fetch_add(1, std::memory_order_relaxed);
  counters_->registered_bytes.fetch_add(reg->length, std::memory_order_relaxed);
  const uint64_t pinned =
      counters_->pinned_bytes.fetch_add(reg->length, std::memory_order_relaxed) + reg->length;
  uint64_t peak = counters_->peak_pinned_bytes.load(std::memory_order_relaxed);
  while (pinned > peak && !counters_->peak_pinned_bytes.compare_exchange_weak(peak, pinned)) {
  }
  return reg;
}

absl::Status CountingRegistrar::Deregister(const mrcache::Registration& reg) {
  const uint64_t start = NowNs();
  absl::Status status = inner().Deregister(reg);
  if (CountTime(start)) {
    counters_->background_deregistrations.fetch_add(1, std::memory_order_relaxed);
  }
  // The contract: resources are released even when Deregister reports an error.
  counters_->deregistrations.fetch_add(1, std::memory_order_relaxed);
  counters_->pinned_bytes.fetch_sub(reg.length, std::memory_order_relaxed);
  return status;
}

}  // namespace mrbench
