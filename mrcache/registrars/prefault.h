// prefault.h: a registrar decorator that faults a big registration's pages in,
// over several threads, before the registrar pins them.
//
// Pinning an untouched range makes the kernel fault in every page inside the
// registration call, one page at a time in one thread; faulting them in
// first with MADV_POPULATE_WRITE (MADV_POPULATE_READ when the access grants
// no write right) is cheaper even in one thread (bench/RESULTS.md, "Big
// buffers"), and splits over threads. The registration that follows pins
// resident pages only, once: one key still covers the whole range.
//
// Rules (config keys prefault_bytes and prefault_threads, config.h):
//  - Only a Register of at least prefault_bytes, without
//    IBV_ACCESS_ON_DEMAND, whose range holds a page that is not resident
//    (mincore on a sample of its pages), is prefaulted.
//  - Only registrars that pin (Registrar::pins_memory()) are wrapped: faulting
//    in pages a registrar never pins would only cost memory.
//  - A prefault that fails (EINVAL on kernels before 5.14, ENOMEM, EFAULT on
//    a hole or a mapping without the right, EPERM, a helper thread that cannot
//    be started: that part runs in the calling thread) falls back silently to
//    the plain registration, which gives the answer; it is counted
//    (PrefaultStats::fallbacks).
//  - Helper threads live for one Register (no pool, so nothing to inherit
//    across fork) and block every signal.
#ifndef MRCACHE_REGISTRARS_PREFAULT_H_
#define MRCACHE_REGISTRARS_PREFAULT_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/optional.h"
#include "mrcache/config.h"
#include "mrcache/registrar.h"

namespace mrcache {

// What a prefaulting registrar did, for tests and diagnostics.
struct PrefaultStats {
  uint64_t prefaults = 0;       // registrations whose range was prefaulted
  uint64_t prefault_bytes = 0;  // bytes of those ranges
  uint64_t fallbacks = 0;       // prefaults that failed (the registration went ahead)
  int last_errno = 0;           // the errno of the latest failed prefault
};

// The helper threads a prefault uses when prefault_threads is `auto`: the
// CPUs this process may run on (sched_getaffinity), at most 8.
size_t AutoPrefaultThreads();

// `inner` wrapped so that big registrations are prefaulted as above, or
// `inner` itself when config.prefault_bytes is 0 or inner pins nothing.
std::unique_ptr<Registrar> WithPrefault(std::unique_ptr<Registrar> inner, const Config& config);

// The counters of a registrar WithPrefault wrapped; nullopt for any other.
absl::optional<PrefaultStats> GetPrefaultStats(const Registrar& registrar);

}  // namespace mrcache

#endif  // MRCACHE_REGISTRARS_PREFAULT_H_
