// prefault.cc: see prefault.h for the contract.
#include "mrcache/registrars/prefault.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "mrcache/forwarding_registrar.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace mrcache {
namespace {

// The most helper threads `auto` uses.
constexpr size_t kMaxAutoThreads = 8;
// No thread gets less than this: below it, starting a thread costs more than
// the share of faulting it takes over.
constexpr size_t kMinBytesPerThread = size_t{2} << 20;
// Pieces are a multiple of this (a huge page) long.
constexpr size_t kChunkAlign = size_t{2} << 20;
// The pieces threads take in turn: about this many per thread, at most
// kMaxPieceBytes each (64 MiB: about 30 ms of faulting, against tens of
// microseconds for taking the next piece).
constexpr size_t kPiecesPerThread = 4;
constexpr size_t kMaxPieceBytes = size_t{64} << 20;
// Pages of a range mincore looks at to decide whether it is resident.
constexpr size_t kResidencySamples = 64;

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// True if one of kResidencySamples pages spread evenly over [addr, addr+len)
// is not resident. False also where mincore fails (memory not mapped): the
// registration then reports it.
bool HasPagesToFault(uintptr_t addr, size_t length) {
  const size_t page = PageSize();
  const uintptr_t first = addr & ~(page - 1);
  const size_t pages = (addr + length - first + page - 1) / page;
  const size_t samples = std::min(pages, kResidencySamples);
  for (size_t i = 0; i < samples; ++i) {
    // Evenly spaced, the first and the last page included.
    const size_t index = samples == 1 ? 0 : i * (pages - 1) / (samples - 1);
    unsigned char resident = 0;
    if (mincore(reinterpret_cast<void*>(first + index * page), page, &resident) != 0) {
      return false;
    }
    if ((resident & 1) == 0) return true;
  }
  return false;
}

// 0, or the errno of the populate call that failed.
int Populate(char* addr, size_t length, int advice) {
  while (madvise(addr, length, advice) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// Faults [addr, addr+length) in with `advice` over up to `threads` threads,
// the calling thread included. The range is cut into pieces that the threads
// take in turn, so that a thread the scheduler holds back leaves its share to
// the others. 0, or the errno of a piece that failed (the others then stop).
int PopulateInParallel(char* addr, size_t length, int advice, size_t threads) {
  const size_t wanted = std::max<size_t>(1, std::min(threads, length / kMinBytesPerThread));
  size_t piece = std::min(kMaxPieceBytes, length / (wanted * kPiecesPerThread));
  piece = std::max(kChunkAlign, piece & ~(kChunkAlign - 1));
  const size_t pieces = (length + piece - 1) / piece;
  std::atomic<size_t> next{0};
  std::atomic<int> error{0};
  auto work = [&] {
    while (error.load(std::memory_order_relaxed) == 0) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= pieces) return;
      const size_t offset = i * piece;
      const int err = Populate(addr + offset, std::min(piece, length - offset), advice);
      if (err != 0) error.store(err, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(wanted - 1);
  // Helpers start with every signal blocked: the application's signals are
  // never delivered to a thread it did not create.
  sigset_t all, saved;
  sigfillset(&all);
  const bool masked = wanted > 1 && pthread_sigmask(SIG_SETMASK, &all, &saved) == 0;
  for (size_t i = 1; i < wanted; ++i) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the threads that started, the calling one included, do it all
    }
  }
  if (masked) pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  work();
  for (std::thread& t : helpers) t.join();
  return error.load(std::memory_order_relaxed);
}

class PrefaultRegistrar final : public ForwardingRegistrar {
 public:
  PrefaultRegistrar(std::unique_ptr<Registrar> inner, size_t min_bytes, size_t threads)
      : ForwardingRegistrar(std::move(inner)), min_bytes_(min_bytes), threads_(threads) {}

  absl::StatusOr<Registration> Register(void* addr, size_t length, int access) override {
    if (length >= min_bytes_ && (access & kAccessOnDemand) == 0 && addr != nullptr &&
        reinterpret_cast<uintptr_t>(addr) + length > reinterpret_cast<uintptr_t>(addr) &&
        HasPagesToFault(reinterpret_cast<uintptr_t>(addr), length)) {
      Prefault(addr, length, access);
    }
    return ForwardingRegistrar::Register(addr, length, access);
  }

  PrefaultStats stats() const {
    PrefaultStats s;
    s.prefaults = prefaults_.load(std::memory_order_relaxed);
    s.prefault_bytes = prefault_bytes_.load(std::memory_order_relaxed);
    s.fallbacks = fallbacks_.load(std::memory_order_relaxed);
    s.last_errno = last_errno_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  void Prefault(void* addr, size_t length, int access) {
    const size_t page = PageSize();
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + length + page - 1) & ~(page - 1);
    // A registration with no write right pins for reading: populating it for
    // writing would make private copies it never needs.
    const int advice = (access & kAccessLocalWrite) ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    const int err =
        PopulateInParallel(reinterpret_cast<char*>(start), end - start, advice, threads_);
    prefaults_.fetch_add(1, std::memory_order_relaxed);
    prefault_bytes_.fetch_add(end - start, std::memory_order_relaxed);
    if (err != 0) {
      fallbacks_.fetch_add(1, std::memory_order_relaxed);
      last_errno_.store(err, std::memory_order_relaxed);
    }
  }

  const size_t min_bytes_;  // prefault_bytes, > 0
  const size_t threads_;    // >= 1
  std::atomic<uint64_t> prefaults_{0};
  std::atomic<uint64_t> prefault_bytes_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<int> last_errno_{0};
};

}  // namespace

size_t AutoPrefaultThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  size_t cpus = 1;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    cpus = static_cast<size_t>(CPU_COUNT(&set));
  } else {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) cpus = static_cast<size_t>(online);
  }
  return std::max<size_t>(1, std::min(cpus, kMaxAutoThreads));
}

std::unique_ptr<Registrar> WithPrefault(std::unique_ptr<Registrar> inner, const Config& config) {
  if (config.prefault_bytes == 0 || !inner->pins_memory()) return inner;
  const size_t threads =
      config.prefault_threads == 0 ? AutoPrefaultThreads() : config.prefault_threads;
  return std::make_unique<PrefaultRegistrar>(std::move(inner), config.prefault_bytes, threads);
}

absl::optional<PrefaultStats> GetPrefaultStats(const Registrar& registrar) {
  const auto* prefault = dynamic_cast<const PrefaultRegistrar*>(&registrar);
  if (prefault == nullptr) return absl::nullopt;
  return prefault->stats();
}

}  // namespace mrcache
