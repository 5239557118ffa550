// replay.h: drives one cache configuration through a trace and measures it.
//
// The replayer owns the buffers: `alloc` is malloc (then every page is
// written, as an application fills a buffer, so registrations pin resident
// pages and the registrar is not charged for first-touch faults), `free` is
// free (the real allocator, so addresses are reused), and before each free it tells the
// configuration that the memory is going away (Driver::Release), which is
// the explicit invalidation every configuration receives in the same way.
// Each `xfer` is Get, optionally a verification, then Put.
//
// Verification (the staleness oracle of docs/ARCHITECTURE.md): the replayer
// writes a token unique to the transfer into the registration the way a
// device would (Driver::DeviceWrite) and checks that the CPU reads it at the
// transfer's address. A registration that still points at pages the
// application no longer sees fails the check and counts as stale.
//
// Counting: a transfer is a hit when its Get made no registration (measured
// by the CountingRegistrar every driver registers through). ns_per_op is the
// time spent inside the driver's Get/Put/Release minus the registrar time
// spent inside them, minus the calibrated cost of the clock reads, divided by
// the number of transfers. Replay fails (and reports why) if the driver
// fails, or if registrations != deregistrations once the driver finished.
#ifndef BENCH_REPLAY_H_
#define BENCH_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "bench/counting_registrar.h"
#include "bench/trace.h"

namespace mrbench {

// A configuration under test, as the replayer drives it.
class Driver {
 public:
  // One referenced registration covering a transfer.
  struct Lease {
    void* handle = nullptr;     // driver-specific
    uintptr_t region_addr = 0;  // the registered range's start
    size_t region_length = 0;
  };
  virtual ~Driver() = default;
  virtual absl::StatusOr<Lease> Get(void* addr, size_t length, int access) = 0;
  virtual absl::Status Put(const Lease& lease) = 0;
  // Writes through the registration as a device would, at region_addr + offset.
  virtual absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src,
                                   size_t length) = 0;
  // [addr, addr+length) is about to be freed.
  virtual absl::Status Release(void* addr, size_t length) = 0;
  // Releases every registration (destroys the cache).
  virtual absl::Status Finish() = 0;
};

struct ReplayOptions {
  bool verify = false;
  // Called now and then with (transfers done, transfers total).
  std::function<void(size_t, size_t)> progress;
};

struct ReplayResult {
  uint64_t transfers = 0;
  uint64_t hits = 0;
  uint64_t registrations = 0;
  uint64_t registered_bytes = 0;
  uint64_t registrar_ns = 0;  // on the workload's thread
  // Deregistrations other threads made (async_dereg's background thread), and
  // their time in the registrar: work off the workload's path.
  uint64_t background_deregistrations = 0;
  uint64_t background_registrar_ns = 0;
  uint64_t peak_pinned_bytes = 0;
  uint64_t cache_ns = 0;  // inside the driver, registrar time excluded
  uint64_t stale = 0;
  uint64_t verified = 0;
};

absl::StatusOr<ReplayResult> Replay(const Trace& trace, Driver& driver,
                                    const RegistrarCounters& counters,
                                    const ReplayOptions& options);

}  // namespace mrbench

#endif  // BENCH_REPLAY_H_
