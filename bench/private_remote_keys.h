// private_remote_keys.h: the remote_keys=private rule for configurations
// that do not have it (ucx, belady-nomerge).
//
// A recording made under remote_keys=private (the shim's default) was served
// that way: every request with a remote right got a registration of exactly
// its bytes, deregistered at its put, never shared. A replay applies the same
// rule to every configuration it compares, so that their hit rates are
// measured under the same rules: mrcache does it itself (its config carries
// the recording's remote_keys), the others through PrivateRemoteKeysDriver
// (a driver wrapper) or OptimalHits' private accesses (belady.h).
#ifndef BENCH_PRIVATE_REMOTE_KEYS_H_
#define BENCH_PRIVATE_REMOTE_KEYS_H_

#include <cstdint>

#include "bench/none_driver.h"
#include "bench/replay.h"
#include "bench/trace.h"

namespace mrbench {

// True if `trace` is a recording made under remote_keys=private.
bool RecordedWithPrivateRemoteKeys(const Trace& trace);

// True if a request with `access` gets a private registration under
// remote_keys=private: it has a remote right.
bool TakesPrivateRegistration(int access);

// The accesses (transfers or registrations) of `trace` with a remote right.
uint64_t RemoteRightAccesses(const Trace& trace);

// Serves requests with a remote right as remote_keys=private does (a
// registration of their own pages on `registrar`, deregistered at Put) and
// passes everything else to `cached`. Both must outlive it.
//
// Invariant: a lease handle with its lowest bit set is a private one (the
// NoneDriver's handle, which is 8-byte aligned, with that bit added); every
// other handle is `cached`'s, which never sets that bit (its handles are
// pointers to its aligned records).
class PrivateRemoteKeysDriver : public Driver {
 public:
  PrivateRemoteKeysDriver(Driver& cached, mrcache::Registrar& registrar)
      : cached_(cached), direct_(registrar) {}
  absl::StatusOr<Lease> Get(void* addr, size_t length, int access) override;
  absl::Status Put(const Lease& lease) override;
  absl::Status DeviceWrite(const Lease& lease, size_t offset, const void* src,
                           size_t length) override;
  absl::Status Release(void* addr, size_t length) override { return cached_.Release(addr, length); }
  absl::Status Finish() override { return cached_.Finish(); }

 private:
  static bool IsPrivate(const Lease& lease);
  static Lease Untagged(const Lease& lease);

  Driver& cached_;
  NoneDriver direct_;
};

}  // namespace mrbench

#endif  // BENCH_PRIVATE_REMOTE_KEYS_H_
