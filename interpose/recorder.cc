#include "interpose/recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "interpose/record_format.h"
#include "mrcache/internal/log.h"

namespace mrcache_preload {
namespace {

// Appends decimal or hexadecimal digits of `v` at `*p` (no allocation).
char* PutDecimal(char* p, uint64_t v) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

char* PutHex(char* p, uint64_t v) {
  *p++ = '0';
  *p++ = 'x';
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

char* PutText(char* p, const char* text) {
  while (*text != '\0') *p++ = *text++;
  return p;
}

// Longest line: "release " + 18 + " " + 20 + "\n", "reg " + 20 + " " + 18 + " " + 20 + " " + 10 +
// "\n".
constexpr size_t kLineMax = 128;

// The releases this thread reported inside its open GetScope, in order
// (recorder.h). Static TLS: the shim is loaded at start-up, and a hook must
// not allocate.
// Zero-initialised (a __thread variable has no constructor): closed, empty.
struct DeferredReleases {
  bool open;
  int count;
  uintptr_t start[Recorder::kMaxDeferred];
  uintptr_t end[Recorder::kMaxDeferred];
};
__thread DeferredReleases tl_deferred __attribute__((tls_model("initial-exec")));

}  // namespace

std::unique_ptr<Recorder> Recorder::Open(const std::string& path, const mrcache::Config& config) {
  const std::string name = absl::StrReplaceAll(path, {{"%p", absl::StrCat(getpid())}});
  const int fd = open(name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    mrcache::Log(mrcache::LogLevel::kError, absl::StrCat("MRCACHE_RECORD=", name, ": ",
                                                         std::strerror(errno), "; not recording"));
    return nullptr;
  }
  const std::string head = absl::StrCat(kRecordHeader, "\n", RecordConfigLine(config), "\n");
  if (write(fd, head.data(), head.size()) != static_cast<ssize_t>(head.size())) {
    mrcache::Log(mrcache::LogLevel::kError,
                 absl::StrCat("MRCACHE_RECORD=", name, ": cannot write: ", std::strerror(errno),
                              "; not recording"));
    close(fd);
    return nullptr;
  }
  std::unique_ptr<Recorder> recorder(new Recorder(fd));
  absl::Status added = mrcache::AddMemoryEventListener(recorder.get());
  if (!added.ok()) {
    mrcache::Log(mrcache::LogLevel::kError,
                 absl::StrCat("MRCACHE_RECORD=", name, ": ", added.message(), "; not recording"));
    return nullptr;  // the destructor closes fd
  }
  recorder->listening_ = true;
  return recorder;
}

Recorder::~Recorder() {
  if (listening_) mrcache::RemoveMemoryEventListener(this);
  const int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
}

void Recorder::WriteLine(const char* line, size_t length) noexcept {
  const int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0) return;
  const int saved_errno = errno;
  // O_APPEND: one write(2) places the whole line at the end of the file.
  ssize_t n;
  do {
    n = write(fd, line, length);
  } while (n < 0 && errno == EINTR);
  errno = saved_errno;
}

uint64_t Recorder::Register(const void* addr, size_t length, unsigned access) noexcept {
  if (fd_.load(std::memory_order_acquire) < 0) return 0;
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  char line[kLineMax];
  char* p = PutText(line, "reg ");
  p = PutDecimal(p, id);
  *p++ = ' ';
  p = PutHex(p, reinterpret_cast<uintptr_t>(addr));
  *p++ = ' ';
  p = PutDecimal(p, length);
  *p++ = ' ';
  p = PutDecimal(p, access);
  *p++ = '\n';
  WriteLine(line, static_cast<size_t>(p - line));
  return id;
}

void Recorder::Deregister(uint64_t id) noexcept {
  if (id == 0) return;
  char line[kLineMax];
  char* p = PutText(line, "dereg ");
  p = PutDecimal(p, id);
  *p++ = '\n';
  WriteLine(line, static_cast<size_t>(p - line));
}

void Recorder::OnMemoryRelease(uintptr_t start, uintptr_t end) noexcept {
  if (end <= start) return;
  DeferredReleases& deferred = tl_deferred;
  if (deferred.open && deferred.count < kMaxDeferred) {
    deferred.start[deferred.count] = start;
    deferred.end[deferred.count] = end;
    ++deferred.count;
    return;
  }
  WriteRelease(start, end);
}

Recorder::GetScope::GetScope(Recorder* recorder) noexcept : recorder_(recorder) {
  if (recorder_ == nullptr) return;
  tl_deferred.count = 0;
  tl_deferred.open = true;
}

Recorder::GetScope::~GetScope() {
  if (recorder_ == nullptr) return;
  DeferredReleases& deferred = tl_deferred;
  deferred.open = false;
  // Writing may report nothing (write(2) releases no memory), so the count
  // is stable here.
  for (int i = 0; i < deferred.count; ++i)
    recorder_->WriteRelease(deferred.start[i], deferred.end[i]);
  deferred.count = 0;
}

void Recorder::WriteRelease(uintptr_t start, uintptr_t end) noexcept {
  char line[kLineMax];
  char* p = PutText(line, "release ");
  p = PutHex(p, start);
  *p++ = ' ';
  p = PutDecimal(p, end - start);
  *p++ = '\n';
  WriteLine(line, static_cast<size_t>(p - line));
}

void Recorder::OnForkChild() noexcept {
  // The child shares the file offset and would reuse the parent's IDs.
  const int fd = fd_.exchange(-1);
  if (fd >= 0) close(fd);
}

}  // namespace mrcache_preload
