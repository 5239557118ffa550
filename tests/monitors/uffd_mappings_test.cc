// The uffd monitor through a cache (with `symbols`: a cache refuses uffd
// alone, and symbols installs nothing into the mappings and reports only the
// libc calls, which the unmap test below bypasses): it watches whole mappings, so it never
// fragments the application's address space nor changes what the
// application's own memory calls do (mmap, mprotect, mremap), it stays below
// the map-count limit, and every range it cannot watch is counted in
// mrc_stats_t with its cause (mrcache/monitors/uffd_monitor.h).
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/monitors/raw_syscall.h"
#include "mrcache/monitors/uffd_monitor.h"
#include "mrcache/mrcache.h"
#include "tests/monitors/map_count.h"
#include "tests/monitors/release_ways.h"

namespace mrcache {
namespace testing {
namespace {

constexpr int kLocalWrite = 1;  // IBV_ACCESS_LOCAL_WRITE
constexpr const char* kUffd = "symbols+uffd";
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

char* MapAnonymous(size_t len, int prot = PROT_READ | PROT_WRITE) {
  void* p = mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// Fresh anonymous memory at `old` (just unmapped by the caller), or, when
// another thread has mapped something into that hole meanwhile (it is the
// highest free gap, where the kernel places any new mapping), anywhere else.
// *reused says which; nullptr when no memory can be mapped.
char* MapAgain(char* old, size_t len, bool* reused) {
  void* again = mmap(old, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  *reused = again == static_cast<void*>(old);
  if (*reused) return old;
  if (again != MAP_FAILED) munmap(again, len);  // a kernel without NOREPLACE
  return MapAnonymous(len);
}

// A cache with one region per request (no merging, no bridging, no limit on
// the number of regions). 0 or the errno of mrc_cache_create.
int OpenCache(const char* monitor, const char* registrar, mrc_cache_t** cache) {
  mrc_config_t* cfg = nullptr;
  int rc = mrc_config_create(&cfg);
  if (rc != 0) return rc;
  const char* settings[][2] = {{"registrar", registrar},
                               {"monitor", monitor},
                               {"max_merge_bytes", "0"},
                               {"bridge_bytes", "0"},
                               {"max_regions", "0"}};
  for (const auto& kv : settings) {
    if (rc == 0) rc = mrc_config_set(cfg, kv[0], kv[1]);
  }
  if (rc == 0) rc = mrc_cache_create(cfg, nullptr, cache);
  mrc_config_destroy(cfg);
  return rc;
}

mrc_stats_t Stats(mrc_cache_t* cache) {
  mrc_stats_t s;
  mrc_stats(cache, &s);
  return s;
}

class UffdMappingsTest : public ::testing::Test {
 protected:
  // False (the test is then skipped, or failed) if there is no cache.
  bool Open(const char* monitor, const char* registrar) {
    int rc = OpenCache(monitor, registrar, &cache_);
    if (rc == ENOTSUP) Skip(monitor);
    EXPECT_TRUE(rc == 0 || rc == ENOTSUP) << mrc_strerror(rc);
    return rc == 0;
  }
  void Skip(const char* monitor) { GTEST_SKIP() << monitor << " is not available in this build"; }
  void SetUp() override { alarm(120); }  // a lost wakeup fails the test, not the run
  void TearDown() override {
    alarm(0);
    if (cache_ == nullptr) return;
    mrc_stats_t s = Stats(cache_);
    mrc_cache_destroy(cache_);
    EXPECT_EQ(s.regions + s.deregistrations, s.registrations);
  }
  // get + put; true if the get succeeded.
  bool GetPut(void* addr, size_t len) {
    mrc_region_t* region = nullptr;
    int rc = mrc_get(cache_, addr, len, kLocalWrite, &region);
    EXPECT_EQ(rc, 0) << mrc_strerror(rc);
    if (rc != 0) return false;
    EXPECT_EQ(mrc_put(cache_, region), 0);
    return true;
  }
  // Gets [addr, addr + len), writes `pattern` through the region as a device
  // would, and returns whether the CPU sees it at addr.
  bool DeviceWriteReachesTheCpu(char* addr, size_t len, uint8_t pattern) {
    mrc_region_t* region = nullptr;
    int rc = mrc_get(cache_, addr, len, kLocalWrite, &region);
    EXPECT_EQ(rc, 0) << mrc_strerror(rc);
    if (rc != 0) return false;
    mrc_region_info_t info;
    mrc_region_info(region, &info);
    std::vector<uint8_t> data(len, pattern);
    size_t offset = static_cast<size_t>(addr - static_cast<char*>(info.addr));
    EXPECT_EQ(mrc_region_device_write(cache_, region, offset, data.data(), len), 0);
    mrc_put(cache_, region);
    return memcmp(addr, data.data(), len) == 0;
  }

  mrc_cache_t* cache_ = nullptr;
};

TEST_F(UffdMappingsTest, FortyThousandPageSeparatedRegionsInOneMappingAddAtMostAThousandMappings) {
  if (!Open(kUffd, "sim")) return;
  constexpr size_t kRegions = 40000;
  char* area = MapAnonymous(2 * kRegions * kPage);
  ASSERT_NE(area, nullptr);
  const size_t before = mrcache_test::ProcessMapCount();
  for (size_t i = 0; i < kRegions; ++i) {
    ASSERT_TRUE(GetPut(area + 2 * i * kPage, kPage)) << "region " << i;
  }
  const size_t after = mrcache_test::ProcessMapCount();
  EXPECT_LE(after, before + 1000) << "map count " << before << " -> " << after;
  mrc_stats_t s = Stats(cache_);
  EXPECT_EQ(s.regions, kRegions);
  EXPECT_EQ(s.watch_failures, 0u);

  // The application's own calls still succeed: 1,000 mappings of its own,
  // and 1,000 mprotects that each split a mapping.
  std::vector<char*> own;
  for (int i = 0; i < 1000; ++i) {
    char* p = MapAnonymous(kPage, i % 2 == 0 ? PROT_READ : PROT_READ | PROT_WRITE);
    ASSERT_NE(p, nullptr) << "mmap " << i << ": " << strerror(errno);
    own.push_back(p);
  }
  char* striped = MapAnonymous(2000 * kPage);
  ASSERT_NE(striped, nullptr);
  for (size_t i = 0; i < 2000; i += 2) {
    ASSERT_EQ(mprotect(striped + i * kPage, kPage, PROT_READ), 0)
        << "mprotect " << i << ": " << strerror(errno);
  }
  munmap(striped, 2000 * kPage);
  for (char* p : own) munmap(p, kPage);
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(area, 2 * kRegions * kPage);
}

TEST_F(UffdMappingsTest, MremapMovesTheWholeMappingAfterAGetInItsMiddle) {
  if (!Open(kUffd, "sim")) return;
  const size_t len = 256 * 1024;
  char* p = MapAnonymous(len);
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < len; ++i) p[i] = static_cast<char>(i * 7 + 3);
  ASSERT_TRUE(GetPut(p + len / 2, 4096));
  char* target = MapAnonymous(len, PROT_NONE);  // a free place to move to
  ASSERT_NE(target, nullptr);
  void* moved = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  ASSERT_EQ(moved, static_cast<void*>(target)) << strerror(errno);
  size_t wrong = 0;
  for (size_t i = 0; i < len; ++i) wrong += target[i] != static_cast<char>(i * 7 + 3);
  EXPECT_EQ(wrong, 0u) << "bytes lost by the move";
  // The cache saw the old range go and serves the new one.
  EXPECT_TRUE(GetPut(target + len / 2, 4096));
  EXPECT_EQ(Stats(cache_).invalidations, 1u);
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(target, len);
}

TEST_F(UffdMappingsTest, MremapGrowsTheMappingInPlaceAfterAGetInItsMiddle) {
  if (!Open(kUffd, "sim")) return;
  const size_t len = 256 * 1024;
  // The room to grow into is freed just before the mremap. Another mapping
  // may still land in it meanwhile (a sanitizer's allocator maps memory at
  // any time): then the in-place growth fails for a reason that is not the
  // cache's, visible in /proc/self/maps, and the scenario starts again.
  char* p = nullptr;
  void* grown = MAP_FAILED;
  for (int attempt = 0; attempt < 5 && grown == MAP_FAILED; ++attempt) {
    if (p != nullptr) {
      ASSERT_EQ(mrc_flush(cache_), 0);
      munmap(p, len);
    }
    p = MapAnonymous(2 * len);
    ASSERT_NE(p, nullptr);
    for (size_t i = 0; i < len; ++i) p[i] = static_cast<char>(i * 5 + 1);
    ASSERT_TRUE(GetPut(p + len / 2, 4096));
    ASSERT_EQ(munmap(p + len, len), 0);  // room to grow into
    grown = mremap(p, len, 2 * len, 0);
    if (grown == MAP_FAILED) {
      ASSERT_EQ(errno, ENOMEM) << strerror(errno);
      ASSERT_GT(mrcache_test::MapCountIn(p + len, len), 0u)
          << "mremap could not grow into free room: ENOMEM";
    }
  }
  ASSERT_EQ(grown, static_cast<void*>(p)) << strerror(errno);
  size_t wrong = 0;
  for (size_t i = 0; i < len; ++i) wrong += p[i] != static_cast<char>(i * 5 + 1);
  EXPECT_EQ(wrong, 0u);
  memset(p + len, 9, len);  // the grown part is the application's
  EXPECT_EQ(p[2 * len - 1], 9);
  EXPECT_TRUE(GetPut(p + len + len / 2, 4096));
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(p, 2 * len);
}

TEST_F(UffdMappingsTest, UnmapAndRemapOfTheSameAddressIsSeenEveryTime) {
  if (!Open(kUffd, "uring")) return;
  const size_t len = 16 * kPage;
  char* p = MapAnonymous(len);
  ASSERT_NE(p, nullptr);
  int reused = 0;
  for (int round = 0; round < 50; ++round) {
    memset(p, 0, len);
    ASSERT_TRUE(DeviceWriteReachesTheCpu(p, len, static_cast<uint8_t>(round + 1)))
        << "round " << round << ": the cache kept a region of unmapped pages";
    // Past libc (and so past symbols): only uffd can see this unmap.
    ASSERT_EQ(RawSyscall(SYS_munmap, reinterpret_cast<long>(p), static_cast<long>(len)), 0);
    bool same = false;
    p = MapAgain(p, len, &same);
    ASSERT_NE(p, nullptr) << strerror(errno);
    reused += same;
  }
  EXPECT_GE(reused, 25) << "the address was taken meanwhile in most rounds";
  memset(p, 0, len);
  EXPECT_TRUE(DeviceWriteReachesTheCpu(p, len, 0xee));
  EXPECT_GE(Stats(cache_).invalidations, 50u);
  EXPECT_EQ(Stats(cache_).watch_failures, 0u);
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(p, len);
}

// The application's own userfaultfd (MISSING mode) and the thread that
// resolves its faults with pages of 0x5a.
class OwnUserfaultfd {
 public:
  bool Start(char* area, size_t len) {
    fd_ = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd_ < 0) return false;
    uffdio_api api;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    if (ioctl(fd_, UFFDIO_API, &api) != 0) return false;
    uffdio_register reg;
    memset(&reg, 0, sizeof reg);
    reg.range.start = reinterpret_cast<uintptr_t>(area);
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) return false;
    stop_ = eventfd(0, EFD_CLOEXEC);
    if (stop_ < 0) return false;
    handler_ = std::thread([this] { Handle(); });
    return true;
  }
  ~OwnUserfaultfd() {
    if (handler_.joinable()) {
      uint64_t one = 1;
      if (write(stop_, &one, sizeof one) == sizeof one) handler_.join();
    }
    if (stop_ >= 0) close(stop_);
    if (fd_ >= 0) close(fd_);
  }
  int faults() const { return faults_.load(); }

 private:
  void Handle() {
    std::vector<char> page(kPage, 0x5a);
    for (;;) {
      pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      uffd_msg msg;
      if (read(fd_, &msg, sizeof msg) != sizeof msg) continue;
      if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
      uffdio_copy copy;
      memset(&copy, 0, sizeof copy);
      copy.dst = msg.arg.pagefault.address & ~static_cast<uint64_t>(kPage - 1);
      copy.src = reinterpret_cast<uintptr_t>(page.data());
      copy.len = kPage;
      faults_.fetch_add(1);            // before the faulting thread resumes
      ioctl(fd_, UFFDIO_COPY, &copy);  // EEXIST if another fault resolved it first
    }
  }
  int fd_ = -1, stop_ = -1;
  std::thread handler_;
  std::atomic<int> faults_{0};
};

TEST_F(UffdMappingsTest, ApplicationsOwnUserfaultfdKeepsWorkingAndTheWatchFailureIsCounted) {
  if (!Open("patch+uffd", "uring")) return;  // patch covers what uffd cannot watch here
  const size_t len = 16 * kPage;
  char* area = MapAnonymous(len);
  ASSERT_NE(area, nullptr);
  {
    OwnUserfaultfd own;
    ASSERT_TRUE(own.Start(area, len)) << strerror(errno);
    for (size_t i = 0; i < len; i += kPage) {
      ASSERT_EQ(area[i], 0x5a) << "page " << i / kPage;
    }
    EXPECT_EQ(own.faults(), 16);

    ASSERT_TRUE(GetPut(area, len));
    mrc_stats_t s = Stats(cache_);
    EXPECT_EQ(s.watch_failures, 1u);
    EXPECT_EQ(s.watch_ebusy, 1u) << "the range is the application's own userfaultfd's";

    // The application's userfaultfd still resolves its faults.
    ASSERT_EQ(madvise(area, len, MADV_DONTNEED), 0);
    for (size_t i = 0; i < len; i += kPage) {
      ASSERT_EQ(area[i], 0x5a) << "page " << i / kPage;
    }
    EXPECT_EQ(own.faults(), 32);
  }
  // The cache stays correct: the memory goes and fresh memory comes at the
  // same address; a device write through the cache reaches it.
  ASSERT_EQ(munmap(area, len), 0);
  bool same = false;
  area = MapAgain(area, len, &same);
  ASSERT_NE(area, nullptr) << strerror(errno);
  memset(area, 0, len);
  EXPECT_TRUE(DeviceWriteReachesTheCpu(area, len, 0x77));
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(area, len);
}

TEST_F(UffdMappingsTest, WatchStopsBelowTheMapCountLimitAndCountsWhy) {
  if (!Open(kUffd, "sim")) return;
  const uffd_monitor::MapCountInfo limits = uffd_monitor::MapCount();
  ASSERT_GT(limits.limit, limits.map_count);
  // Split one mapping (page by page, alternating protections) until the
  // process is at the limit; the kernel's maximum stays above it.
  const size_t pages = 2 * (limits.limit - limits.map_count) + 8;
  char* striped = MapAnonymous(pages * kPage);
  ASSERT_NE(striped, nullptr);
  for (size_t i = 0; i < pages && mrcache_test::ProcessMapCount() < limits.limit; i += 2 * 1024) {
    for (size_t j = i; j < i + 2 * 1024 && j < pages; j += 2) {
      ASSERT_EQ(mprotect(striped + j * kPage, kPage, PROT_READ), 0) << strerror(errno);
    }
  }
  ASSERT_GE(mrcache_test::ProcessMapCount(), limits.limit);
  char* buffer = MapAnonymous(4 * kPage);
  ASSERT_NE(buffer, nullptr) << "the application's own mmap below vm.max_map_count";
  ASSERT_TRUE(GetPut(buffer, 4 * kPage));  // the cache still serves it, unwatched
  mrc_stats_t s = Stats(cache_);
  EXPECT_EQ(s.watch_map_limit, 1u);
  EXPECT_EQ(s.watch_failures, 1u);

  // Once the process is below the limit again, the next look finds it so.
  ASSERT_EQ(munmap(striped, pages * kPage), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(uffd_monitor::kMapCountRecheckMs + 100));
  char* later = MapAnonymous(4 * kPage);
  ASSERT_NE(later, nullptr);
  ASSERT_TRUE(GetPut(later, 4 * kPage));
  EXPECT_EQ(Stats(cache_).watch_failures, 1u);
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(buffer, 4 * kPage);
  munmap(later, 4 * kPage);
}

// uffd cannot watch a private file mapping: the failure is counted, and no
// registration of it is cached (each get gets its own, deregistered at put),
// since an unmap there would reach no uffd event.
TEST_F(UffdMappingsTest, RangeSpanningAFileMappingIsCountedAsEinvalAndNeverCached) {
  if (!Open(kUffd, "sim")) return;
  char path[] = "/tmp/uffd_mappings_testXXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, 4 * kPage), 0);
  void* file = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(file, MAP_FAILED);
  memset(file, 1, 4 * kPage);  // a written file-backed MAP_PRIVATE mapping
  ASSERT_TRUE(GetPut(file, 4 * kPage));
  mrc_stats_t s = Stats(cache_);
  EXPECT_EQ(s.watch_einval, 1u);
  EXPECT_EQ(s.watch_failures, 1u);
  EXPECT_EQ(s.regions, 0u) << "an unwatched range was cached";
  EXPECT_EQ(s.bypassed, 1u);
  ASSERT_TRUE(GetPut(file, 4 * kPage));
  s = Stats(cache_);
  EXPECT_EQ(s.registrations, 2u) << "the second get must not be a hit";
  EXPECT_EQ(s.deregistrations, 2u);
  EXPECT_EQ(s.watch_einval, 2u);
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(file, 4 * kPage);
}

// The page where a library's .data ends and its .bss begins: the writable
// segment's last file-backed page (a private file mapping).
struct SegmentSearch {
  const void* library_base;
  uintptr_t shared_page = 0;
};
int FindDataBssPage(dl_phdr_info* info, size_t, void* arg) {
  auto* search = static_cast<SegmentSearch*>(arg);
  if (reinterpret_cast<const void*>(info->dlpi_addr) != search->library_base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) != 0 && ph.p_memsz > ph.p_filesz) {
      search->shared_page = (info->dlpi_addr + ph.p_vaddr + ph.p_filesz) & ~(kPage - 1);
    }
  }
  return 1;
}

// A library's first .bss page shares a file-backed page with .data: uffd
// cannot watch it, so a get over it (and the .bss page after it) is never
// served from the cache, and a device write through it reaches the CPU.
TEST_F(UffdMappingsTest, LibrarysDataBssPageIsNeverServedFromTheCache) {
  if (!Open("patch+uffd", "uring")) return;
  void* library = dlopen(DlcloseVictimPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  Dl_info info;
  ASSERT_NE(dladdr(dlsym(library, "dlclose_victim_data"), &info), 0);
  SegmentSearch search{info.dli_fbase};
  dl_iterate_phdr(&FindDataBssPage, &search);
  ASSERT_NE(search.shared_page, 0u) << "no writable segment with a .bss";
  char* page = reinterpret_cast<char*>(search.shared_page);
  for (int round = 0; round < 2; ++round) {
    EXPECT_TRUE(DeviceWriteReachesTheCpu(page + kPage, kPage, static_cast<uint8_t>(0x20 + round)));
    EXPECT_TRUE(GetPut(page, 2 * kPage));
  }
  mrc_stats_t s = Stats(cache_);
  EXPECT_GE(s.watch_einval, 2u);
  EXPECT_EQ(s.regions, 1u) << "only the wholly anonymous .bss page may be cached";
  EXPECT_EQ(s.bypassed, 2u);
  ASSERT_EQ(mrc_flush(cache_), 0);
  dlclose(library);
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
