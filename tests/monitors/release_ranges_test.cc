// The ranges release_ranges.h computes for shmat(SHM_REMAP) and for shared
// files that shrink or lose a range (ftruncate, truncate, fallocate): the pure
// page arithmetic, and the reports against this process's real mappings
// (/proc/self/maps), with no monitor installed: the Report* functions are
// called directly and a RecordingListener collects what they report.
#include "mrcache/monitors/release_ranges.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/monitors/recording_listener.h"

namespace mrcache {
namespace testing {
namespace {

constexpr uint64_t kPage = 4096;
using Ranges = std::vector<std::pair<uintptr_t, uintptr_t>>;

Ranges Recorded(const RecordingListener& listener) {
  Ranges out;
  for (size_t i = 0; i < listener.count(); ++i)
    out.push_back({listener.at(i).start, listener.at(i).end});
  return out;
}

uintptr_t Addr(const char* p, uint64_t offset = 0) {
  return reinterpret_cast<uintptr_t>(p) + offset;
}

// ---- page arithmetic ----

TEST(TruncatedSpan, GrowingOrKeepingTheSizeDropsNothing) {
  FileSpan grow = TruncatedSpan(4 * kPage, 8 * kPage, kPage);
  FileSpan same = TruncatedSpan(4 * kPage, 4 * kPage, kPage);
  EXPECT_GE(grow.begin, grow.end);
  EXPECT_GE(same.begin, same.end);
}

TEST(TruncatedSpan, ShrinkingToZeroDropsEveryPage) {
  FileSpan s = TruncatedSpan(4 * kPage, 0, kPage);
  EXPECT_EQ(s.begin, 0u);
  EXPECT_EQ(s.end, UINT64_MAX);
}

TEST(TruncatedSpan, ShrinkingToAnUnalignedSizeKeepsThePageHoldingIt) {
  FileSpan s = TruncatedSpan(4 * kPage, kPage + 100, kPage);
  EXPECT_EQ(s.begin, 2 * kPage);
  EXPECT_EQ(s.end, UINT64_MAX);
}

TEST(FallocatedSpan, PunchHoleCoversEveryPageItTouches) {
  FileSpan s =
      FallocatedSpan(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kPage + 10, 2 * kPage, kPage);
  EXPECT_EQ(s.begin, kPage);
  EXPECT_EQ(s.end, 4 * kPage);
}

TEST(FallocatedSpan, ZeroRangeCoversEveryPageItTouches) {
  FileSpan s = FallocatedSpan(FALLOC_FL_ZERO_RANGE, 2 * kPage, kPage, kPage);
  EXPECT_EQ(s.begin, 2 * kPage);
  EXPECT_EQ(s.end, 3 * kPage);
}

TEST(FallocatedSpan, CollapseAndInsertShiftEverythingFromTheOffset) {
  for (int mode : {FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE}) {
    FileSpan s = FallocatedSpan(mode, 3 * kPage, kPage, kPage);
    EXPECT_EQ(s.begin, 3 * kPage) << mode;
    EXPECT_EQ(s.end, UINT64_MAX) << mode;
  }
}

TEST(FallocatedSpan, AllocationModesDropNothing) {
  for (int mode : {0, FALLOC_FL_KEEP_SIZE, 0x40 /* FALLOC_FL_UNSHARE_RANGE */}) {
    FileSpan s = FallocatedSpan(mode, 0, 8 * kPage, kPage);
    EXPECT_GE(s.begin, s.end) << mode;
  }
}

TEST(FallocatedSpan, LengthThatOverflowsRunsToTheEndOfTheFile) {
  FileSpan s = FallocatedSpan(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kPage, UINT64_MAX, kPage);
  EXPECT_EQ(s.begin, kPage);
  EXPECT_EQ(s.end, UINT64_MAX & ~(kPage - 1));
}

TEST(MappedFileSpan, TranslatesFileOffsetsThroughTheMappingOffset) {
  // A mapping of file pages [2, 6) at 0x10000: file pages [3, 5) sit at +1..+3 pages.
  AddressSpan a = MappedFileSpan(0x10000, 0x10000 + 4 * kPage, 2 * kPage, {3 * kPage, 5 * kPage});
  EXPECT_EQ(a.start, 0x10000 + kPage);
  EXPECT_EQ(a.end, 0x10000 + 3 * kPage);
}

TEST(MappedFileSpan, ClipsToTheMapping) {
  AddressSpan a = MappedFileSpan(0x10000, 0x10000 + 4 * kPage, 2 * kPage, {0, UINT64_MAX});
  EXPECT_EQ(a.start, 0x10000u);
  EXPECT_EQ(a.end, 0x10000 + 4 * kPage);
}

TEST(MappedFileSpan, DisjointOffsetsGiveNothing) {
  AddressSpan below = MappedFileSpan(0x10000, 0x10000 + 4 * kPage, 2 * kPage, {0, 2 * kPage});
  AddressSpan above =
      MappedFileSpan(0x10000, 0x10000 + 4 * kPage, 2 * kPage, {6 * kPage, UINT64_MAX});
  EXPECT_GE(below.start, below.end);
  EXPECT_GE(above.start, above.end);
}

// ---- against real mappings ----

// A memfd of 8 pages mapped twice: A = file pages [0, 4), B = file pages [2, 8).
class MemfdMappedTwice : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = memfd_create("mrcache-release-ranges-test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(ftruncate(fd_, 8 * kPage), 0);
    void* a = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    void* b = mmap(nullptr, 6 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 2 * kPage);
    ASSERT_NE(a, MAP_FAILED);
    ASSERT_NE(b, MAP_FAILED);
    a_ = static_cast<char*>(a);
    b_ = static_cast<char*>(b);
    listener_.Clear();
  }
  void TearDown() override {
    if (a_ != nullptr) munmap(a_, 4 * kPage);
    if (b_ != nullptr) munmap(b_, 6 * kPage);
    if (fd_ >= 0) close(fd_);
  }

  int fd_ = -1;
  char* a_ = nullptr;
  char* b_ = nullptr;
  RecordingListener listener_;
};

TEST_F(MemfdMappedTwice, FtruncateToAnUnalignedSizeReportsTheDroppedPagesOfBothMappings) {
  ReportFtruncate(fd_, kPage + 100);  // file pages [2, 8) go
  Ranges want = {{Addr(a_, 2 * kPage), Addr(a_, 4 * kPage)}, {Addr(b_), Addr(b_, 6 * kPage)}};
  if (b_ < a_) std::swap(want[0], want[1]);  // /proc/self/maps is in address order
  EXPECT_EQ(Recorded(listener_), want);
}

TEST_F(MemfdMappedTwice, FtruncateThatGrowsReportsNothing) {
  ReportFtruncate(fd_, 16 * kPage);
  ReportFtruncate(fd_, 8 * kPage);  // the same size
  EXPECT_EQ(listener_.count(), 0u);
}

TEST_F(MemfdMappedTwice, PunchHoleInTheMiddleReportsThePagesItTouches) {
  ReportFallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 3 * kPage + 8, kPage);
  // file pages [3, 5): A shows page 3, B shows pages 3 and 4.
  Ranges want = {{Addr(a_, 3 * kPage), Addr(a_, 4 * kPage)},
                 {Addr(b_, kPage), Addr(b_, 3 * kPage)}};
  if (b_ < a_) std::swap(want[0], want[1]);
  EXPECT_EQ(Recorded(listener_), want);
}

TEST_F(MemfdMappedTwice, FallocateThatOnlyAllocatesReportsNothing) {
  ReportFallocate(fd_, 0, 0, 16 * kPage);
  ReportFallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, 16 * kPage);
  EXPECT_EQ(listener_.count(), 0u);
}

TEST_F(MemfdMappedTwice, FallocateWithBadArgumentsReportsNothing) {
  ReportFallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, -kPage, kPage);
  ReportFallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 0);
  ReportFallocate(-1, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kPage);
  EXPECT_EQ(listener_.count(), 0u);
}

TEST_F(MemfdMappedTwice, AnotherFileOfTheSameSizeIsNotConfusedWithIt) {
  int other = memfd_create("mrcache-release-ranges-other", MFD_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(ftruncate(other, 8 * kPage), 0);
  ReportFtruncate(other, 0);
  close(other);
  EXPECT_EQ(listener_.count(), 0u);
}

TEST(ReportFtruncate, NonRegularFilesReportNothing) {
  RecordingListener listener;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ReportFtruncate(fds[0], 0);
  close(fds[0]);
  close(fds[1]);
  ReportFtruncate(-1, 0);
  EXPECT_EQ(listener.count(), 0u);
}

TEST(ReportTruncate, ShrinkingByPathReportsTheMappingOfThatFile) {
  std::string name = "/mrcache-release-ranges-" + std::to_string(getpid());
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * kPage), 0);
  void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  RecordingListener listener;
  std::string path = "/dev/shm" + name;
  ReportTruncate(path.c_str(), kPage);
  ReportTruncate("/dev/shm/mrcache-no-such-file", 0);
  ReportTruncate(nullptr, 0);
  Ranges got = Recorded(listener);
  munmap(p, 4 * kPage);
  close(fd);
  shm_unlink(name.c_str());
  char* base = static_cast<char*>(p);
  EXPECT_EQ(got, (Ranges{{Addr(base, kPage), Addr(base, 4 * kPage)}}));
}

// ---- shmat(SHM_REMAP) ----

class ShmSegment : public ::testing::Test {
 protected:
  void SetUp() override {
    shmid_ = shmget(IPC_PRIVATE, 3 * kPage + 1, IPC_CREAT | 0600);  // 4 pages once attached
    ASSERT_GE(shmid_, 0);
  }
  void TearDown() override { shmctl(shmid_, IPC_RMID, nullptr); }
  int shmid_ = -1;
  RecordingListener listener_;
};

TEST_F(ShmSegment, RemapReportsTheSegmentSizeRoundedUpToPages) {
  ReportShmat(shmid_, reinterpret_cast<void*>(0x200000), SHM_REMAP);
  EXPECT_EQ(Recorded(listener_), (Ranges{{0x200000, 0x200000 + 4 * kPage}}));
}

TEST_F(ShmSegment, RemapWithShmRndRoundsTheAddressDown) {
  ReportShmat(shmid_, reinterpret_cast<void*>(0x200000 + 100), SHM_REMAP | SHM_RND);
  EXPECT_EQ(Recorded(listener_), (Ranges{{0x200000, 0x200000 + 4 * kPage}}));
}

TEST_F(ShmSegment, AttachWithoutRemapOrAddressReportsNothing) {
  ReportShmat(shmid_, reinterpret_cast<void*>(0x200000), 0);
  ReportShmat(shmid_, nullptr, SHM_REMAP);
  EXPECT_EQ(listener_.count(), 0u);
}

TEST_F(ShmSegment, RemapOfAnUnknownSegmentReportsNothing) {
  ReportShmat(-1, reinterpret_cast<void*>(0x200000), SHM_REMAP);
  EXPECT_EQ(listener_.count(), 0u);
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
