// release_ways.h: every way memory can disappear (DESIGN.md section 5, the
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
  void* heap = nullptr;  // malloc'ed block (glibc free, jemalloc purge)
  bool released = false;
};

struct ReleaseWay {
  const char* name;  // row name, e.g. "munmap", "madvise_dontneed"
  Victim (*prepare)();
  void (*release)(Victim&);
  void (*cleanup)(Victim&);
};

// All rows available in this process. jemalloc_purge is included only when
// jemalloc is the process allocator; glibc_free only when it is not.
std::vector<ReleaseWay> AllReleaseWays();
const ReleaseWay* FindReleaseWay(const std::string& name);
bool JemallocIsAllocator();

}  // namespace testing
}  // namespace mrcache

#endif  // TESTS_MONITORS_RELEASE_WAYS_H_
