#include "mrcache/monitors/release_ranges.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "mrcache/monitors/memory_events.h"

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
  uint64_t start = 0, end = 0, offset = 0, inode = 0;
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
  l.offset = ParseNumber(&p, end, 16);
  while (p < end && *p == ' ') ++p;
  SkipField(&p, end);  // dev
  l.inode = ParseNumber(&p, end, 10);
  while (p < end && *p == ' ') ++p;
  static const char kSysv[] = "/SYSV";
  l.sysv = end - p >= 5;
  for (int i = 0; l.sysv && i < 5; ++i) l.sysv = p[i] == kSysv[i];
  return l;
}

// Calls visit(line) for each line of /proc/self/maps, in address order, until
// visit returns false. The file is read with raw system calls into a stack
// buffer (hook context: no allocation, no hooked libc call). False if the
// file cannot be opened.
template <typename Visit>
bool ForEachMapsLine(Visit visit) {
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  char buf[4096];
  char line[256];  // only the fields before the path matter; long paths are cut
  size_t line_len = 0;
  bool done = false;
  while (!done) {
    long n = syscall(SYS_read, fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (long i = 0; i < n && !done; ++i) {
      if (buf[i] != '\n') {
        if (line_len < sizeof(line)) line[line_len++] = buf[i];
        continue;
      }
      done = !visit(ParseMapsLine(line, line + line_len));
      line_len = 0;
    }
  }
  syscall(SYS_close, fd);
  return true;
}

// Finds the extent of the SysV attachment at addr. False if none starts there.
bool FindAttachment(uintptr_t addr, uintptr_t* out_end, uint64_t* shmid) {
  bool found = false;
  uintptr_t run_end = 0;
  uint64_t inode = 0;
  ForEachMapsLine([&](const MapsLine& l) {
    if (!found) {
      if (l.start == addr && l.sysv) {
        found = true;
        run_end = l.end;
        inode = l.inode;
      }
      return true;
    }
    if (l.start == run_end && l.sysv && l.inode == inode) {
      run_end = l.end;
      return true;
    }
    return false;
  });
  if (!found) return false;
  *out_end = run_end;
  *shmid = inode;
  return true;
}

size_t PageSize() noexcept { return static_cast<size_t>(getpagesize()); }

uint64_t RoundUp(uint64_t v, uint64_t page) noexcept {
  return v > UINT64_MAX - (page - 1) ? UINT64_MAX & ~(page - 1) : (v + page - 1) & ~(page - 1);
}

// The size in bytes, rounded up to pages, of SysV segment shmid; 0 if
// shmctl(IPC_STAT) fails (no such segment, or no read permission).
size_t SegmentBytes(int shmid) noexcept {
  struct shmid_ds ds;
  if (syscall(SYS_shmctl, shmid, IPC_STAT, &ds) != 0) return 0;
  return static_cast<size_t>(RoundUp(ds.shm_segsz, PageSize()));
}

// Reports, for every mapping of the file `st` names in this process, the
// addresses that show the file offsets in `span`. Mappings are matched by
// inode number only: the device /proc/self/maps shows is the superblock's,
// which differs from fstat's st_dev on btrfs subvolumes and overlayfs. A
// same-numbered inode of another filesystem costs a needless invalidation,
// never a missed one.
void ReportFileSpan(const struct stat& st, FileSpan span) noexcept {
  uint64_t inode = st.st_ino;
  if (span.begin >= span.end || inode == 0) return;  // maps shows inode 0 for anonymous memory
  ForEachMapsLine([&](const MapsLine& l) {
    if (l.inode == inode && !l.sysv) {
      AddressSpan a = MappedFileSpan(l.start, l.end, l.offset, span);
      if (a.start < a.end) {
        ReportMemoryRelease(reinterpret_cast<void*>(a.start), a.end - a.start);
      }
    }
    return true;
  });
}

// The mappings of a regular file shrinking from its current size to `length`.
void ReportShrink(const struct stat& st, off_t length) noexcept {
  if (!S_ISREG(st.st_mode) || length < 0) return;
  ReportFileSpan(st, TruncatedSpan(static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(length),
                                   PageSize()));
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
  uintptr_t seg_end = start + SegmentBytes(static_cast<int>(shmid));
  if (seg_end > end) end = seg_end;
  ReportMemoryRelease(addr, end - start);
}

void ReportShmat(int shmid, const void* addr, int shmflg) noexcept {
  if ((shmflg & SHM_REMAP) == 0 || addr == nullptr) return;
  uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if ((shmflg & SHM_RND) != 0) start &= ~static_cast<uintptr_t>(SHMLBA - 1);
  size_t bytes = SegmentBytes(shmid);
  if (bytes != 0) ReportMemoryRelease(reinterpret_cast<void*>(start), bytes);
}

FileSpan TruncatedSpan(uint64_t old_size, uint64_t new_size, uint64_t page) noexcept {
  if (new_size >= old_size) return {0, 0};
  return {RoundUp(new_size, page), UINT64_MAX};
}

FileSpan FallocatedSpan(int mode, uint64_t offset, uint64_t len, uint64_t page) noexcept {
  uint64_t end = len > UINT64_MAX - offset ? UINT64_MAX : offset + len;
  if ((mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0) {
    return {offset & ~(page - 1), UINT64_MAX};
  }
  if ((mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) != 0) {
    return {offset & ~(page - 1), RoundUp(end, page)};
  }
  return {0, 0};
}

AddressSpan MappedFileSpan(uintptr_t map_start, uintptr_t map_end, uint64_t map_offset,
                           FileSpan span) noexcept {
  if (map_start >= map_end || span.begin >= span.end) return {0, 0};
  uint64_t map_file_end = map_offset + (map_end - map_start);
  if (map_file_end < map_offset) map_file_end = UINT64_MAX;  // wrapped: to the end
  uint64_t lo = span.begin > map_offset ? span.begin : map_offset;
  uint64_t hi = span.end < map_file_end ? span.end : map_file_end;
  if (lo >= hi) return {0, 0};
  return {map_start + static_cast<uintptr_t>(lo - map_offset),
          map_start + static_cast<uintptr_t>(hi - map_offset)};
}

void ReportFtruncate(int fd, off_t length) noexcept {
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) == 0) ReportShrink(st, length);
}

void ReportTruncate(const char* path, off_t length) noexcept {
  struct stat st;
  if (path != nullptr && syscall(SYS_newfstatat, AT_FDCWD, path, &st, 0) == 0) {
    ReportShrink(st, length);
  }
}

void ReportFallocate(int fd, int mode, off_t offset, off_t len) noexcept {
  if (offset < 0 || len <= 0) return;  // fallocate fails with EINVAL
  FileSpan span =
      FallocatedSpan(mode, static_cast<uint64_t>(offset), static_cast<uint64_t>(len), PageSize());
  if (span.begin >= span.end) return;
  struct stat st;
  if (syscall(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode)) ReportFileSpan(st, span);
}

}  // namespace mrcache
