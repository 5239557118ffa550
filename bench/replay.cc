#include "bench/replay.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "bench/recorded_layout.h"
#include "mrcache/errno_status.h"

namespace mrbench {
namespace {

using mrcache::ErrnoStatus;

// The cost of one NowNs() call, measured once.
uint64_t ClockCostNs() {
  static const uint64_t cost = [] {
    constexpr int kReads = 20000;
    const uint64_t start = NowNs();
    uint64_t sink = 0;
    for (int i = 0; i < kReads; ++i) sink += NowNs();
    const uint64_t total = NowNs() - start;
    return sink == 0 ? 0 : total / kReads;
  }();
  return cost;
}

struct Buffer {
  char* data = nullptr;
  uint64_t bytes = 0;
};

// Writes every page, as an application fills a buffer before sending it, so
// that registration pins resident pages (no first-touch faults or
// copy-on-write breaks are charged to the registrar).
void TouchPages(const Buffer& buffer) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (uint64_t off = 0; off < buffer.bytes; off += page) buffer.data[off] = 1;
  buffer.data[buffer.bytes - 1] = 1;
}

// Times driver calls and subtracts the registrar time spent inside them.
class CallTimer {
 public:
  explicit CallTimer(const RegistrarCounters& counters)
      : counters_(counters), clock_cost_(ClockCostNs()) {}
  template <typename F>
  auto operator()(F&& call) {
    const uint64_t reg_before = counters_.registrar_ns.load(std::memory_order_relaxed);
    const uint64_t start = NowNs();
    auto result = call();
    const uint64_t elapsed = NowNs() - start;
    const uint64_t reg = counters_.registrar_ns.load(std::memory_order_relaxed) - reg_before;
    const uint64_t overhead = reg + clock_cost_;
    cache_ns_ += elapsed > overhead ? elapsed - overhead : 0;
    return result;
  }
  uint64_t cache_ns() const { return cache_ns_; }

 private:
  const RegistrarCounters& counters_;
  const uint64_t clock_cost_;
  uint64_t cache_ns_ = 0;
};

absl::Status FreeBuffer(Driver& driver, CallTimer& timer, Buffer& buffer) {
  absl::Status status = timer([&] { return driver.Release(buffer.data, buffer.bytes); });
  std::free(buffer.data);
  buffer = Buffer{};
  return status;
}

// Writes a token unique to transfer `serial` through the lease at `addr`;
// true if the CPU sees it.
absl::StatusOr<bool> VerifyTransfer(Driver& driver, const Driver::Lease& lease, char* addr,
                                    uint64_t length, uint64_t serial) {
  unsigned char token[16];
  const size_t n = length < sizeof token ? length : sizeof token;
  for (size_t i = 0; i < n; ++i)
    token[i] = static_cast<unsigned char>((serial >> (8 * (i % 8))) + 0x5a + i);
  std::memset(addr, 0, n);
  const size_t offset = reinterpret_cast<uintptr_t>(addr) - lease.region_addr;
  absl::Status status = driver.DeviceWrite(lease, offset, token, n);
  if (!status.ok()) return status;
  return std::memcmp(addr, token, n) == 0;
}

// Fills in the figures every replay reports once the driver finished.
absl::StatusOr<ReplayResult> Conclude(ReplayResult result, const CallTimer& timer,
                                      const RegistrarCounters& counters) {
  result.cache_ns = timer.cache_ns();
  result.registrations = counters.registrations.load();
  result.registered_bytes = counters.registered_bytes.load();
  result.registrar_ns = counters.registrar_ns.load();
  result.background_deregistrations = counters.background_deregistrations.load();
  result.background_registrar_ns = counters.background_registrar_ns.load();
  result.peak_pinned_bytes = counters.peak_pinned_bytes.load();
  if (counters.deregistrations.load() != result.registrations) {
    return ErrnoStatus(EIO, absl::StrCat("leak: ", result.registrations, " registrations but ",
                                         counters.deregistrations.load(), " deregistrations"));
  }
  return result;
}

// Get through the driver (counted as a transfer, a hit if it registered
// nothing), with the optional verification.
absl::StatusOr<Driver::Lease> CountedGet(Driver& driver, CallTimer& timer,
                                         const RegistrarCounters& counters,
                                         const ReplayOptions& options, size_t total, char* addr,
                                         uint64_t length, int access, ReplayResult* result) {
  const uint64_t regs_before = counters.registrations.load(std::memory_order_relaxed);
  absl::StatusOr<Driver::Lease> lease = timer([&] { return driver.Get(addr, length, access); });
  if (!lease.ok()) return lease.status();
  result->hits += counters.registrations.load(std::memory_order_relaxed) == regs_before;
  ++result->transfers;
  if (options.verify) {
    absl::StatusOr<bool> seen = VerifyTransfer(driver, *lease, addr, length, result->transfers);
    if (!seen.ok()) {
      (void)driver.Put(*lease);
      return seen.status();
    }
    ++result->verified;
    result->stale += !*seen;
  }
  if (options.progress && (result->transfers & 1023) == 0)
    options.progress(result->transfers, total);
  return lease;
}

// A recorded trace: registrations held from reg to dereg, releases replayed
// in the address layout of the recording (recorded_layout.h).
absl::StatusOr<ReplayResult> ReplayRecorded(const Trace& trace, Driver& driver,
                                            const RegistrarCounters& counters,
                                            const ReplayOptions& options) {
  absl::StatusOr<RecordedLayout> layout = RecordedLayout::Map(trace);
  if (!layout.ok()) return layout.status();
  ReplayResult result;
  absl::flat_hash_map<uint32_t, Driver::Lease> held;
  CallTimer timer(counters);
  const size_t total = trace.transfers();
  absl::Status status;
  for (const TraceOp& op : trace.ops) {
    if (op.kind == TraceOp::kReg) {
      char* addr = layout->Translate(op.offset);
      layout->Touch(addr, op.length);
      absl::StatusOr<Driver::Lease> lease =
          CountedGet(driver, timer, counters, options, total, addr, op.length, op.access, &result);
      if (!lease.ok()) {
        status = lease.status();
        break;
      }
      held[op.id] = *lease;
    } else if (op.kind == TraceOp::kDereg) {
      auto it = held.find(op.id);
      status = timer([&] { return driver.Put(it->second); });
      held.erase(it);
    } else if (op.kind == TraceOp::kRelease) {
      for (const RecordedLayout::Piece& piece : layout->Clip(op.offset, op.length)) {
        status = timer([&] { return driver.Release(piece.addr, piece.length); });
        if (!status.ok()) break;
        layout->Discard(piece);
      }
    }
    if (!status.ok()) break;
  }
  for (auto& entry : held) {
    absl::Status put = timer([&] { return driver.Put(entry.second); });
    if (status.ok()) status = put;
  }
  absl::Status finished = driver.Finish();  // before the layout is unmapped
  if (status.ok()) status = finished;
  if (!status.ok()) return status;
  return Conclude(result, timer, counters);
}

}  // namespace

absl::StatusOr<ReplayResult> Replay(const Trace& trace, Driver& driver,
                                    const RegistrarCounters& counters,
                                    const ReplayOptions& options) {
  absl::Status valid = ValidateTrace(trace);
  if (!valid.ok()) return valid;
  if (trace.recorded()) return ReplayRecorded(trace, driver, counters, options);
  ReplayResult result;
  absl::flat_hash_map<uint32_t, Buffer> buffers;
  CallTimer timer(counters);
  const size_t total = trace.transfers();
  absl::Status status;
  for (const TraceOp& op : trace.ops) {
    if (op.kind == TraceOp::kAlloc) {
      Buffer& buffer = buffers[op.id];
      buffer.data = static_cast<char*>(std::malloc(op.length));
      if (buffer.data == nullptr) {
        status = ErrnoStatus(ENOMEM, absl::StrCat("malloc(", op.length, ") failed"));
        break;
      }
      buffer.bytes = op.length;
      TouchPages(buffer);
      continue;
    }
    Buffer& buffer = buffers[op.id];
    if (op.kind == TraceOp::kFree) {
      status = FreeBuffer(driver, timer, buffer);
      buffers.erase(op.id);
      if (!status.ok()) break;
      continue;
    }
    char* addr = buffer.data + op.offset;
    absl::StatusOr<Driver::Lease> lease =
        CountedGet(driver, timer, counters, options, total, addr, op.length, op.access, &result);
    if (!lease.ok()) {
      status = lease.status();
      break;
    }
    status = timer([&] { return driver.Put(*lease); });
    if (!status.ok()) break;
  }
  for (auto& entry : buffers) {
    absl::Status freed = FreeBuffer(driver, timer, entry.second);
    if (status.ok()) status = freed;
  }
  absl::Status finished = driver.Finish();
  if (status.ok()) status = finished;
  if (!status.ok()) return status;
  return Conclude(result, timer, counters);
}

}  // namespace mrbench
