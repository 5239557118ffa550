// release_ways.h: every way memory can disappear (docs/ARCHITECTURE.md, "The release rule"; the
// rows of the invalidation matrix), as prepare / release / cleanup steps that
// tests and benchmarks share.
//
// Prepare() maps and touches fresh memory and returns a Victim whose
// [gone, gone + gone_len) is the range that Release() makes disappear.
// Release() performs exactly one such operation (the row's system call or
// library call). Cleanup() unmaps whatever the victim still holds. None of
// these is hook context: they may allocate.
#ifndef TESTS_MONITORS_RELEASE_WAYS_H_
#define TESTS_MONITORS_RELEASE_WAYS_H_

#include <cstddef>
#include <string>
#include <vector>

namespace mrcache {
namespace testing {

struct Victim {
  char* gone = nullptr;  // the range that disappears
  size_t gone_len = 0;
  char* base = nullptr;  // what the victim owns (for Cleanup)
  size_t base_len = 0;
  char* extra = nullptr;  // a second mapping (mremap's new place, a guard)
  size_t extra_len = 0;
  int shmid = -1;
  int fd = -1;           // the file behind a shared file mapping (memfd, shm_open)
  std::string path;      // its name under /dev/shm, if it has one
  void* heap = nullptr;  // malloc'ed block (glibc free, jemalloc purge)
  bool released = false;
  char* refill = nullptr;  // fresh memory RefillSameAddress mapped
  size_t refill_len = 0;
  void* library = nullptr;  // dlopen handle of the library holding the range (dlclose)
};

struct ReleaseWay {
  const char* name;  // row name, e.g. "munmap", "madvise_dontneed"
  Victim (*prepare)();
  void (*release)(Victim&);
  void (*cleanup)(Victim&);
};

// After Release(): makes [gone, gone + gone_len) ordinary fresh memory
// again. Where the range is no longer mapped (munmap, mremap, brk, shmdt,
// free, raw munmap) fresh anonymous memory is mapped at the same address
// (MAP_FIXED_NOREPLACE); where it still is (madvise, mmap MAP_FIXED, jemalloc
// purge) it is left as the release made it. (Rows `syscall_munmap`: munmap
// through glibc's syscall() function; `raw_munmap`: an inline `syscall`
// instruction that no libc code sees.) False if the address was taken
// by someone else meanwhile. Cleanup() unmaps the refill.
bool RefillSameAddress(Victim& v);
void CleanupVictim(const ReleaseWay& way, Victim& v);

// The library the `dlclose` row loads (tests/monitors/dlclose_victim.c), a
// data dependency of :release_ways: its path in the test's runfiles.
std::string DlcloseVictimPath();

// All rows available in this process. jemalloc_purge is included only when
// jemalloc is the process allocator; glibc_free only when glibc's malloc is
// (not under ASan/TSan, whose allocators keep freed chunks in quarantine).
std::vector<ReleaseWay> AllReleaseWays();
const ReleaseWay* FindReleaseWay(const std::string& name);
bool JemallocIsAllocator();
bool GlibcMallocIsAllocator();

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_RELEASE_WAYS_H_
