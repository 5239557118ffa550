#include "mrcache/release_ranges.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mrcache/memory_events.h"

extern "C" void* __curbrk;  // glibc's cached program break (exported data)

namespace mrcache {
namespace {

#ifndef MADV_GUARD_INSTALL
constexpr int kMadvGuardInstall = 102;  // Linux 6.13: zaps the range
#else
constexpr int kMadvGuardInstall = MADV_GUARD_INSTALL;
#endif

// Parses a hexadecimal or decimal number at *p, advancing it.
uint64_t ParseNumber(const char** p, const char* end, int base) {
  uint64_t v = 0;
  while (*p < end) {
    char c = **p;
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      break;
    }
    v = v * base + d;
    ++*p;
  }
  return v;
}

void SkipField(const char** p, const char* end) {
  while (*p < end && **p != ' ') ++*p;
  while (*p < end && **p == ' ') ++*p;
}

struct MapsLine {
  uint64_t start = 0, end = 0, inode = 0;
  bool sysv = false;
};

// "start-end perms offset dev inode   path"
MapsLine ParseMapsLine(const char* p, const char* end) {
  MapsLine l;
  l.start = ParseNumber(&p, end, 16);
  if (p < end && *p == '-') ++p;
  l.end = ParseNumber(&p, end, 16);
  while (p < end && *p == ' ') ++p;
  SkipField(&p, end);  // perms
  SkipField(&p, end);  // offset
  SkipField(&p, end);  // dev
  l.inode = ParseNumber(&p, end, 10);
  while (p < end && *p == ' ') ++p;
  static const char kSysv[] = "/SYSV";
  l.sysv = end - p >= 5;
  for (int i = 0; l.sysv && i < 5; ++i) l.sysv = p[i] == kSysv[i];
  return l;
}

// Finds the extent of the SysV attachment at addr. False if none starts there.
bool FindAttachment(uintptr_t addr, uintptr_t* out_end, uint64_t* shmid) {
  int fd = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  char buf[4096];
  char line[256];  // only the fields before the path matter; long paths are cut
  size_t line_len = 0;
  bool found = false, done = false;
  uintptr_t run_end = 0;
  uint64_t inode = 0;
  while (!done) {
    long n = syscall(SYS_read, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long i = 0; i < n && !done; ++i) {
      if (buf[i] != '\n') {
        if (line_len < sizeof(line)) line[line_len++] = buf[i];
        continue;
      }
      MapsLine l = ParseMapsLine(line, line + line_len);
      line_len = 0;
      if (!found) {
        if (l.start == addr && l.sysv) {
          found = true;
          run_end = l.end;
          inode = l.inode;
        }
      } else if (l.start == run_end && l.sysv && l.inode == inode) {
        run_end = l.end;
      } else {
        done = true;
      }
    }
  }
  syscall(SYS_close, fd);
  if (!found) return false;
  *out_end = run_end;
  *shmid = inode;
  return true;
}

}  // namespace

void ReportMunmap(void* addr, size_t length) noexcept { ReportMemoryRelease(addr, length); }

void ReportMmap(void* addr, size_t length, int flags) noexcept {
  if ((flags & MAP_FIXED) != 0) ReportMemoryRelease(addr, length);
}

bool MadviseReleases(int advice) noexcept {
  switch (advice) {
    case MADV_DONTNEED:
    case MADV_FREE:
    case MADV_REMOVE:
#ifdef MADV_DONTNEED_LOCKED
    case MADV_DONTNEED_LOCKED:
#endif
    case kMadvGuardInstall:
      return true;
    default:
      return false;
  }
}

void ReportMadvise(void* addr, size_t length, int advice) noexcept {
  if (MadviseReleases(advice)) ReportMemoryRelease(addr, length);
}

void ReportMremapBefore(void* old_address, size_t old_size, size_t new_size, int flags,
                        void* new_address) noexcept {
  char* old = static_cast<char*>(old_address);
  if ((flags & (MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)) != 0) {
    // The mapping may move (or its pages do): the whole old range is released
    // before the call returns and another thread can map there.
    ReportMemoryRelease(old, old_size);
  } else if (new_size < old_size) {
    ReportMemoryRelease(old + new_size, old_size - new_size);
  }
  if ((flags & MREMAP_FIXED) != 0) ReportMemoryRelease(new_address, new_size);
}

void ReportMremapMoved(void* old_address, size_t old_size, void* result) noexcept {
  if (result != MAP_FAILED && result != old_address) ReportMemoryRelease(old_address, old_size);
}

void* CurrentBreak() noexcept {
  void* cur = __curbrk;
  if (cur == nullptr) cur = reinterpret_cast<void*>(syscall(SYS_brk, 0));
  return cur;
}

void ReportBrk(void* new_break) noexcept {
  if (new_break == nullptr) return;  // brk(0) queries
  char* cur = static_cast<char*>(CurrentBreak());
  char* nb = static_cast<char*>(new_break);
  if (nb < cur) ReportMemoryRelease(nb, static_cast<size_t>(cur - nb));
}

void ReportSbrk(intptr_t increment) noexcept {
  if (increment >= 0) return;
  char* cur = static_cast<char*>(CurrentBreak());
  ReportMemoryRelease(cur + increment, static_cast<size_t>(-increment));
}

void ReportShmdt(const void* addr) noexcept {
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = 0;
  uint64_t shmid = 0;
  if (!FindAttachment(start, &end, &shmid)) return;
  struct shmid_ds ds;
  if (syscall(SYS_shmctl, static_cast<int>(shmid), IPC_STAT, &ds) == 0) {
    size_t page = static_cast<size_t>(getpagesize());
    uintptr_t seg_end = start + ((ds.shm_segsz + page - 1) & ~(page - 1));
    if (seg_end > end) end = seg_end;
  }
  ReportMemoryRelease(addr, end - start);
}

}  // namespace mrcache
