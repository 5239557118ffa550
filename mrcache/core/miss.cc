// miss.cc: a Miss's start and what a spoiled attempt does next (miss.h).
#include "mrcache/core/miss.h"

#include <cerrno>

#include "mrcache/core/range.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/memory_events.h"

namespace mrcache {
namespace {

constexpr int kMaxMissAttempts = 16;

// How long a miss waits for another thread's release of the same addresses
// to finish (see AcquireSlow) before it gives up with EAGAIN.
constexpr uint64_t kReleaseWaitNs = 10'000'000'000;

}  // namespace

Miss Miss::Of(uintptr_t start, uintptr_t end, int user_access, int extra_access, size_t align,
              size_t page, bool allow_merge) {
  Miss m;
  m.start = start;
  m.end = end;
  m.user_access = user_access;
  m.access = user_access | extra_access;
  // The smallest range ever registered: the request rounded to the region
  // granularity, or to pages if the granularity is coarser.
  const size_t fine = align < page ? align : page;
  m.page_start = AlignDown(start, fine);
  m.page_end = AlignUp(end, fine);
  // Remote rights: the region reaches only requested pages (remote_keys),
  // so alignment coarser than a page does not apply.
  m.remote = (user_access & kAccessRemoteBits) != 0;
  m.plan_start = m.remote ? m.page_start : AlignDown(start, align);
  m.plan_end = m.remote ? m.page_end : AlignUp(end, align);
  if (m.plan_end == 0) m.NarrowToPages();
  m.allow_merge = allow_merge;
  return m;
}

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
