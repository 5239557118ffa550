#include "mrcache/stats_page.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "mrcache/errno_status.h"

namespace mrcache {

const StatsCounterInfo kStatsCounterInfo[kStatCounters] = {
    {"hits", "hits_total", false, false, "Gets answered by a cached region."},
    {"misses", "misses_total", false, false, "Gets that registered."},
    {"registrations", "registrations_total", false, false,
     "Registrations the cache made on its registrar."},
    {"deregistrations", "deregistrations_total", false, false,
     "Deregistrations the cache made on its registrar."},
    {"evictions", "evictions_total", false, false,
     "Unused regions evicted for max_regions, max_bytes or the pin budget."},
    {"invalidations", "invalidations_total", false, false,
     "Regions invalidated because their memory was released."},
    {"merges", "merges_total", false, false, "Regions merged into a larger one."},
    {"regions", "regions", true, false, "Regions registered now."},
    {"pinned_bytes", "pinned_bytes", true, false, "Bytes the cache's registrations hold now."},
    {"peak_pinned_bytes", "peak_pinned_bytes", true, false,
     "The most bytes the cache's registrations held at once."},
    {"pin_budget_bytes", "pin_budget_bytes", true, false,
     "Bytes the cache may pin now (0: no limit)."},
    {"max_bytes", "max_bytes", true, false, "The max_bytes configured (0: unlimited)."},
    {"registrar_ns", "registrar_seconds_total", false, true, "Time spent in the registrar."},
    {"registrar_failures", "registrar_failures_total", false, false,
     "Registrations the registrar refused."},
    {"bypassed", "bypassed_total", false, false, "Gets registered for themselves, never cached."},
    {"remote_private", "remote_private_total", false, false,
     "Gets with remote rights registered privately (remote_keys=private)."},
    {"watch_failures", "watch_failures_total", false, false,
     "Registered ranges the memory monitor could not watch."},
    {"dereg_queue_depth", "dereg_queue_depth", true, false,
     "Registrations waiting for (or in) the background deregistration thread now (async_dereg)."},
    {"dereg_wait_ns", "dereg_wait_seconds_total", false, true,
     "Time the cache's callers waited for the background deregistration thread."},
    {"background_dereg_ns", "background_dereg_seconds_total", false, true,
     "Time the background deregistration thread spent deregistering the cache's registrations."},
};

const StatsCounterInfo kStatsRailCounterInfo[kStatRailCounters] = {
    {"registrations", "rail_registrations_total", false, false, "Registrations made on the rail."},
    {"deregistrations", "rail_deregistrations_total", false, false,
     "Deregistrations made on the rail."},
    {"regions", "rail_regions", true, false, "Regions registered on the rail now."},
    {"registered_bytes", "rail_registered_bytes", true, false, "Bytes registered on the rail now."},
    {"registrar_ns", "rail_registrar_seconds_total", false, true,
     "Time spent in the rail's registrar."},
};

// The help texts name the sample rate.
static_assert(kHistogramSampleEvery == 16, "say the sample rate in kStatsHistogramInfo's help");
const StatsHistogramInfo kStatsHistogramInfo[kStatHistograms] = {
    {"region_bytes", "region_size_bytes", false,
     "Size of the registrations the cache made: one in 16 counted."},
    {"miss_ns", "miss_duration_seconds", true,
     "Latency of the gets that missed, registration included: one in 16 timed."},
    {"register_ns", "registration_duration_seconds", true,
     "Latency of registrar registrations: a miss's in one miss in 16, every other."},
    {"deregister_ns", "deregistration_duration_seconds", true,
     "Latency of the registrar deregistrations: one in 16 timed."},
    {"get_bytes", "get_size_bytes", false,
     "Requested length of the gets that missed: one in 16 counted (those of miss_ns)."},
};

std::string StatsPagePath(uid_t uid, pid_t pid) {
  return absl::StrCat("/dev/shm/mrcache-", uid, "-", pid);
}

pid_t PidOfStatsPageName(absl::string_view name, uid_t uid) {
  const std::string prefix = absl::StrCat("mrcache-", uid, "-");
  if (name.substr(0, prefix.size()) != prefix) return -1;
  absl::string_view digits = name.substr(prefix.size());
  if (digits.empty() || digits.size() > 10) return -1;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
  }
  int64_t pid = 0;
  if (!absl::SimpleAtoi(digits, &pid) || pid <= 0 || pid > INT32_MAX) return -1;
  return static_cast<pid_t>(pid);
}

uint64_t ProcessStartTicks(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields
  // resume after its last ')'.
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return 0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(close_paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state): field 22 is fields[19].
  uint64_t ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &ticks)) return 0;
  return ticks;
}

namespace {

absl::Status Garbled(pid_t pid, absl::string_view what) {
  return ErrnoStatus(EINVAL, absl::StrCat("the statistics page of process ", pid,
                                          " is not a valid mrcache page: ", what));
}

// A NUL-terminated string within `field`, or false.
bool TerminatedString(const char* field, size_t size, std::string* out) {
  const void* nul = std::memchr(field, '\0', size);
  if (nul == nullptr) return false;
  out->assign(field, static_cast<const char*>(nul) - field);
  return true;
}

// A name fit for a JSON string or a Prometheus label as it is: no control,
// quote, backslash or non-ASCII byte.
bool PlainName(const std::string& name) {
  for (char ch : name) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == '"' || ch == '\\' ||
        static_cast<unsigned char>(ch) >= 0x7f) {
      return false;
    }
  }
  return true;
}

// The rails of a valid slot `i` into `c` (its rail becomes their names
// joined), or the error.
absl::Status ParseRails(const StatsSlot& slot, uint32_t i, pid_t pid, CacheSnapshot* c) {
  if (slot.rail_count > kStatsRails) {
    return Garbled(pid, absl::StrCat("slot ", i, " has ", slot.rail_count, " rails, at most ",
                                     kStatsRails, " fit"));
  }
  if (slot.rail_count == 0) return absl::OkStatus();
  std::string joined;
  for (uint32_t r = 0; r < slot.rail_count; ++r) {
    RailSnapshot rail;
    if (!TerminatedString(slot.rails[r].name, sizeof slot.rails[r].name, &rail.name)) {
      return Garbled(pid, absl::StrCat("slot ", i, " has an unterminated name of rail ", r));
    }
    if (!PlainName(rail.name)) {
      return Garbled(
          pid, absl::StrCat("slot ", i, " has a name of rail ", r, " with control or quote bytes"));
    }
    std::memcpy(rail.counters, slot.rails[r].counters, sizeof rail.counters);
    absl::StrAppend(&joined, r ? "+" : "", rail.name);
    c->rails.push_back(std::move(rail));
  }
  c->rail = std::move(joined);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProcessSnapshot> ParseStatsPage(absl::string_view bytes, pid_t pid, uid_t uid) {
  StatsPageHeader h;
  if (bytes.size() < sizeof h) {
    return Garbled(pid,
                   absl::StrCat("truncated: ", bytes.size(), " bytes, a header needs ", sizeof h));
  }
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kStatsPageMagic, sizeof h.magic) != 0) return Garbled(pid, "bad magic");
  if (h.version != kStatsPageVersion) {
    return Garbled(
        pid, absl::StrCat("version ", h.version, ", this reader knows version ", kStatsPageVersion,
                          " (use the mrcache-info of the same "
                          "release as the process)"));
  }
  if (h.header_bytes != sizeof(StatsPageHeader) || h.slot_bytes != sizeof(StatsSlot) ||
      h.slot_count != kStatsSlots) {
    return Garbled(pid, absl::StrCat("its layout (header, slot size or slot count) differs from "
                                     "version ",
                                     kStatsPageVersion, "'s"));
  }
  if (bytes.size() != kStatsPageBytes) {
    return Garbled(pid, absl::StrCat(bytes.size() < kStatsPageBytes ? "truncated: " : "oversized: ",
                                     bytes.size(), " bytes, expected ", kStatsPageBytes));
  }
  if (h.pid != static_cast<uint32_t>(pid)) {
    return Garbled(pid, absl::StrCat("it names process ", h.pid));
  }
  if (h.uid != static_cast<uint32_t>(uid))
    return Garbled(pid, absl::StrCat("it names uid ", h.uid));
  if (h.interval_ns != 0 || h.unpublished > (1u << 30)) return Garbled(pid, "bad header values");
  ProcessSnapshot out;
  out.pid = pid;
  out.start_ticks = h.start_ticks;
  out.interval_ns = h.interval_ns;
  out.unpublished = h.unpublished;
  for (uint32_t i = 0; i < kStatsSlots; ++i) {
    StatsSlot slot;
    std::memcpy(&slot, bytes.data() + sizeof h + i * sizeof slot, sizeof slot);
    if (slot.seq & 1) return ErrnoStatus(EAGAIN, absl::StrCat("slot ", i, " is being written"));
    if (slot.live > 1) return Garbled(pid, absl::StrCat("slot ", i, " has a bad flag"));
    if (slot.live == 0) continue;
    CacheSnapshot c;
    c.cache_id = slot.cache_id;
    if (!TerminatedString(slot.rail, sizeof slot.rail, &c.rail) ||
        !TerminatedString(slot.registrar, sizeof slot.registrar, &c.registrar)) {
      return Garbled(pid, absl::StrCat("slot ", i, " has an unterminated name"));
    }
    if (!PlainName(c.rail + c.registrar)) {
      return Garbled(pid, absl::StrCat("slot ", i, " has a name with control or quote bytes"));
    }
    c.updated_unix_ns = slot.updated_unix_ns;
    std::memcpy(c.counters, slot.counters, sizeof c.counters);
    std::memcpy(c.histograms, slot.histograms, sizeof c.histograms);
    std::memcpy(c.histogram_sums, slot.histogram_sums, sizeof c.histogram_sums);
    const absl::Status rails = ParseRails(slot, i, pid, &c);
    if (!rails.ok()) return rails;
    out.caches.push_back(std::move(c));
  }
  return out;
}

namespace {

// The whole file at `fd` (exactly kStatsPageBytes, or what there is).
absl::StatusOr<std::string> ReadWhole(int fd, pid_t pid) {
  std::string bytes(kStatsPageBytes + 1, '\0');  // one more: an oversized file shows
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = pread(fd, &bytes[got], bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot read the statistics page of process ", pid));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// The slots' seq words of `bytes` (a parsed page).
std::vector<uint64_t> Seqs(const std::string& bytes) {
  std::vector<uint64_t> seqs(kStatsSlots);
  for (uint32_t i = 0; i < kStatsSlots; ++i) {
    std::memcpy(&seqs[i], bytes.data() + sizeof(StatsPageHeader) + i * sizeof(StatsSlot),
                sizeof(uint64_t));
  }
  return seqs;
}

// Asks the publisher of the page at `fd` (whose first reading parsed) to
// refresh it, and waits for that refresh at most kStatsRefreshWaitNs.
// True if it came.
bool RequestRefresh(int fd) {
  const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  static_assert(sizeof(StatsPageHeader) <= 4096, "the header fits the first page");
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) return false;
  auto* header = static_cast<StatsPageHeader*>(mapped);
  const uint32_t mine = __atomic_add_fetch(&header->refresh_request, 1, __ATOMIC_ACQ_REL);
  WakeStatsWord(&header->refresh_request);
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  bool refreshed = false;
  for (;;) {
    const uint32_t done = __atomic_load_n(&header->refresh_done, __ATOMIC_ACQUIRE);
    // Counters that wrap: done has reached mine if it is not behind it.
    if (static_cast<int32_t>(done - mine) >= 0) {
      refreshed = true;
      break;
    }
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const uint64_t waited = static_cast<uint64_t>(now.tv_sec - start.tv_sec) * 1'000'000'000u +
                            static_cast<uint64_t>(now.tv_nsec) -
                            static_cast<uint64_t>(start.tv_nsec);
    if (waited >= kStatsRefreshWaitNs) break;
    WaitStatsWord(&header->refresh_done, done, kStatsRefreshWaitNs - waited);
  }
  munmap(mapped, bytes);
  return refreshed;
}

}  // namespace

void WakeStatsWord(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void WaitStatsWord(uint32_t* word, uint32_t seen, uint64_t timeout_ns) {
  timespec limit = {static_cast<time_t>(timeout_ns / 1'000'000'000u),
                    static_cast<long>(timeout_ns % 1'000'000'000u)};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, timeout_ns ? &limit : nullptr, nullptr, 0);
}

absl::StatusOr<ProcessSnapshot> ReadStatsPageAt(const std::string& path, pid_t pid) {
  // Read-write: the reader asks for a refresh in the page's header.
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return ErrnoStatus(
          ENOENT, absl::StrCat("process ", pid, " publishes no mrcache statistics (no ", path,
                               ": not running, no cache, or stats_shm=off)"));
    }
    if (err == ELOOP) return ErrnoStatus(EACCES, absl::StrCat(path, " is a symbolic link"));
    if (err == EISDIR) return ErrnoStatus(EACCES, absl::StrCat(path, " is not a regular file"));
    struct stat st;
    if (err == EACCES && lstat(path.c_str(), &st) == 0 && st.st_uid == getuid()) {
      return ErrnoStatus(EACCES,
                         absl::StrCat(path, " has mode ", absl::StrFormat("%o", st.st_mode & 0777),
                                      ", not 0600: not trusted"));
    }
    if (err == EACCES) {
      return ErrnoStatus(EACCES, absl::StrCat(path,
                                              " belongs to another user: only its owner "
                                              "may read it"));
    }
    return ErrnoStatus(err, absl::StrCat("cannot open ", path));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return ErrnoStatus(EACCES, absl::StrCat(path, " is not a regular file"));
  }
  const uid_t uid = getuid();
  if (st.st_uid != uid) {
    close(fd);
    return ErrnoStatus(EACCES, absl::StrCat(path, " belongs to uid ", st.st_uid, ", not to uid ",
                                            uid, ": not trusted"));
  }
  if ((st.st_mode & 0777) != 0600) {
    close(fd);
    return ErrnoStatus(EACCES,
                       absl::StrCat(path, " has mode ", absl::StrFormat("%o", st.st_mode & 0777),
                                    ", not 0600: not trusted"));
  }
  bool asked = false, refreshed = false;
  absl::Status last;
  for (int attempt = 0; attempt < 100; ++attempt) {
    absl::StatusOr<std::string> first = ReadWhole(fd, pid);
    if (!first.ok()) {
      close(fd);
      return first.status();
    }
    absl::StatusOr<ProcessSnapshot> snapshot = ParseStatsPage(*first, pid, uid);
    if (!snapshot.ok() && StatusToErrno(snapshot.status()) != EAGAIN) {
      close(fd);
      return snapshot.status();
    }
    // Asked once a reading parsed (a torn slot aside): the reader writes
    // into no page of another kind, nor beyond the page's end.
    if (!asked) {
      asked = true;
      refreshed = RequestRefresh(fd);
      continue;
    }
    if (snapshot.ok()) {
      // Consistent if no slot's seq moved while it was copied.
      absl::StatusOr<std::string> again = ReadWhole(fd, pid);
      if (again.ok() && again->size() == first->size() && Seqs(*again) == Seqs(*first)) {
        close(fd);
        snapshot->refreshed_on_request = refreshed;
        return snapshot;
      }
      last = ErrnoStatus(EAGAIN, "slots kept changing while read");
    } else {
      last = snapshot.status();
    }
    const timespec pause = {0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  close(fd);
  return ErrnoStatus(EAGAIN, absl::StrCat("the statistics page of process ", pid,
                                          " never read consistently: ", last.message()));
}

absl::StatusOr<ProcessSnapshot> ReadStatsPage(pid_t pid) {
  return ReadStatsPageAt(StatsPagePath(getuid(), pid), pid);
}

}  // namespace mrcache
