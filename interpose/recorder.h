// recorder.h: MRCACHE_RECORD=PATH -- the application's registration stream,
// for `mrbench --trace PATH` (format: bench/trace.h, docs/man/mrbench.1).
//
// The stream is text, one event per line, each line written whole by one
// write(2) on an O_APPEND descriptor (so lines of concurrent threads never
// interleave, and nothing is buffered: a crash loses no recorded line):
//
//   # mrcache-record 1                   header: format and version
//   config KEY=VALUE ...                 the shim's effective configuration
//                                        (every mrcache::Config key)
//   reg ID ADDR LENGTH ACCESS            a registration a PD cache served
//   dereg ID                             its ibv_dereg_mr (or the put of an
//                                        ibv_rereg_mr / ibv_close_device)
//   release ADDR LENGTH                  a release a memory monitor reported
//
// ID: decimal, unique in the process, from 1. ADDR: 0x-prefixed hex. LENGTH,
// ACCESS: decimal (ACCESS: the IBV_ACCESS_* bits asked for).
//
// What is recorded: every request that reached a PD cache (and got an alias).
// Requests the shim registers directly (bypassed by rule, dmabuf, or after a
// cache failure) are not: no cache would ever see them.
// Monitors report a fenced release twice (before and after the system call,
// memory_events.h); both reports are recorded, as the live caches got both,
// and replaying the second is harmless (nothing can be cached in between).
//
// Order: a release the recording thread itself reports while a get of the
// shim is under way on it (a GetScope is open: the cache deregistering dead
// regions, the registrar's or the shim's own allocations) is written after
// that get's `reg` line, not when it is reported. The cache answered the get
// (a hit's lookup, a miss's registration) before anything the get released
// itself; written first, the replay would apply the release before the get
// and miss where the live cache hit (one registration more in the replay).
// A thread defers at most kMaxDeferred releases per get; beyond that, and
// for releases of other threads, lines are written as they are reported.
//
// Hook safety: OnMemoryRelease formats into a stack buffer and calls write(2),
// or stores the range in a fixed per-thread array: no allocation, no lock, no
// registrar call. Cost: one write(2) per event.
// A forked child stops recording (OnForkChild): its events would reuse the
// parent's IDs in the same file.
// Errors: a PATH that cannot be created is reported once on stderr and nothing
// is recorded; the application runs as it would without MRCACHE_RECORD.
// "%p" in PATH is replaced by the process ID (one file per process).
#ifndef INTERPOSE_RECORDER_H_
#define INTERPOSE_RECORDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mrcache/config.h"
#include "mrcache/monitors/memory_events.h"

namespace mrcache_preload {

class Recorder : public mrcache::MemoryEventListener {
 public:
  // Creates (truncates) `path` ("%p" = getpid()), writes the header and the
  // configuration line, and listens to memory releases. nullptr after
  // printing one line on stderr if the file cannot be created or written, or
  // the listener table is full.
  static std::unique_ptr<Recorder> Open(const std::string& path, const mrcache::Config& config);
  ~Recorder() override;

  // Records a registration a cache served; returns its ID (0 if recording
  // stopped: a forked child).
  uint64_t Register(const void* addr, size_t length, unsigned access) noexcept;
  // Records the deregistration of `id` (ignored for 0).
  void Deregister(uint64_t id) noexcept;

  void OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept override;

  static constexpr int kMaxDeferred = 32;
  // A get of the shim on this thread, from before the cache is asked until
  // its `reg` line is written (or the get is given up): releases this thread
  // reports meanwhile are written when the scope closes, after that line.
  // `recorder` may be null (not recording). Scopes do not nest.
  class GetScope {
   public:
    explicit GetScope(Recorder* recorder) noexcept;
    ~GetScope();
    GetScope(const GetScope&) = delete;
    GetScope& operator=(const GetScope&) = delete;

   private:
    Recorder* recorder_;
  };
  void OnForkChild() noexcept override;

 private:
  explicit Recorder(int fd) : fd_(fd) {}
  // Writes one whole line; gives up silently on error (recording is best effort
  // once open: the application must not be affected).
  void WriteLine(const char* line, size_t length) noexcept;
  void WriteRelease(uintptr_t start, uintptr_t end) noexcept;

  std::atomic<int> fd_;
  std::atomic<uint64_t> next_id_{1};
  bool listening_ = false;
};

}  // namespace mrcache_preload

#endif  // INTERPOSE_RECORDER_H_
