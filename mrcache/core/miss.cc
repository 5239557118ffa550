// miss.cc: what a spoiled attempt does next (miss.h).
#include "mrcache/core/miss.h"

#include <cerrno>

#include "mrcache/errno_status.h"
#include "mrcache/monitors/memory_events.h"

namespace mrcache {
namespace {

constexpr int kMaxMissAttempts = 16;

// How long a miss waits for another thread's release of the same addresses
// to finish (see AcquireSlow) before it gives up with EAGAIN.
constexpr uint64_t kReleaseWaitNs = 10'000'000'000;

}  // namespace

absl::Status RetryAfterSpoil(Miss* miss, const Attempt& attempt, bool in_flight) {
  if (in_flight) {
    // A release of these addresses is under way in another thread (the
    // kernel may already have handed them to this caller's new mapping). It
    // ends when that thread leaves its system call, however long it is
    // descheduled: wait for it, without spending an attempt.
    if (++miss->in_flight_waits > kMaxMissAttempts * 16 ||
        !WaitForReleasesInFlight(attempt.start, attempt.end, kReleaseWaitNs)) {
      return ErrnoStatus(EAGAIN,
                         "mrc_get: other threads kept releasing this memory while it was "
                         "registered");
    }
    return absl::OkStatus();
  }
  if (attempt.widened_range) {
    // Releases keep landing in what widening added: register exactly the
    // requested pages, which only a release of the caller's own memory can
    // spoil.
    if (++miss->widened_spoils >= 2) miss->NarrowToPages();
    return absl::OkStatus();
  }
  // Only this: a get never fails because other memory changed.
  if (++miss->exact_spoils >= kMaxMissAttempts) {
    return ErrnoStatus(EAGAIN,
                       "mrc_get: the requested memory kept being released while it was "
                       "registered");
  }
  return absl::OkStatus();
}

}  // namespace mrcache
