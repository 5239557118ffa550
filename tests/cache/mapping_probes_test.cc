// mapping_probes_test.cc: the two probes bridging relies on, against memory
// laid out by the test: FindMappingExtent (/proc/self/maps) and
// ResidentStart/ResidentEnd (mincore).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include <gtest/gtest.h>

#include "mrcache/core/residency.h"
#include "mrcache/monitors/mapping_bounds.h"

namespace mrcache {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class MappingProbesTest : public ::testing::Test {
 protected:
  // 48 pages: [0,16) PROT_NONE guard, [16,32) read-write, [32,48) guard.
  void SetUp() override {
    base_ = static_cast<char*>(
        mmap(nullptr, 48 * kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(base_, MAP_FAILED);
    ASSERT_EQ(mprotect(base_ + 16 * kPage, 16 * kPage, PROT_READ | PROT_WRITE), 0);
  }
  void TearDown() override { munmap(base_, 48 * kPage); }
  uintptr_t At(size_t page) const { return reinterpret_cast<uintptr_t>(base_ + page * kPage); }

  char* base_ = nullptr;
};

TEST_F(MappingProbesTest, FindsTheExtentOfTheMappingHoldingBothAddresses) {
  MappingExtent m;
  ASSERT_TRUE(FindMappingExtent(At(18), At(30), &m));
  EXPECT_EQ(m.start, At(16));
  EXPECT_EQ(m.end, At(32));
}

TEST_F(MappingProbesTest, JoinsPartsOfAMappingThatOnlyDifferInHiddenFlags) {
  // mlock splits the mapping in the kernel's list; /proc/self/maps shows
  // three lines of the same kind, which are one mapping to the cache.
  if (mlock(base_ + 20 * kPage, 4 * kPage) != 0) GTEST_SKIP() << "mlock not permitted";
  MappingExtent m;
  ASSERT_TRUE(FindMappingExtent(At(17), At(17), &m));
  EXPECT_EQ(m.start, At(16));
  EXPECT_EQ(m.end, At(32));
  munlock(base_ + 20 * kPage, 4 * kPage);
}

TEST_F(MappingProbesTest, AddressesInDifferentMappingsHaveNoCommonExtent) {
  MappingExtent m;
  EXPECT_FALSE(FindMappingExtent(At(20), At(40), &m));
}

TEST_F(MappingProbesTest, ScanOfPrivateAnonymousMemorySaysAnonymous) {
  MappingScan scan;
  ASSERT_TRUE(ScanMappings(At(18), At(30), &scan));
  EXPECT_TRUE(scan.covered);
  EXPECT_TRUE(scan.anonymous);
}

TEST_F(MappingProbesTest, ScanOfSharedFileMemoryIsNotAnonymous) {
  int fd = memfd_create("mrcache-mapping-probes", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(4 * kPage)), 0);
  void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  MappingScan scan;
  ASSERT_TRUE(ScanMappings(a, a + 4 * kPage, &scan));
  EXPECT_TRUE(scan.covered);
  EXPECT_FALSE(scan.anonymous);
  munmap(p, 4 * kPage);
  close(fd);
}

TEST_F(MappingProbesTest, ScanOfTheStackIsNotAnonymous) {
  int local = 0;
  uintptr_t a = reinterpret_cast<uintptr_t>(&local);
  MappingScan scan;
  ASSERT_TRUE(ScanMappings(a, a + 1, &scan));
  EXPECT_FALSE(scan.anonymous) << "the main thread's [stack] has a name";
}

TEST_F(MappingProbesTest, ScanOfAnUnmappedRangeIsNotAnonymous) {
  ASSERT_EQ(munmap(base_ + 24 * kPage, kPage), 0);
  MappingScan scan;
  ASSERT_TRUE(ScanMappings(At(24), At(25), &scan));
  EXPECT_FALSE(scan.covered);
  EXPECT_FALSE(scan.anonymous);
  ASSERT_EQ(
      mmap(base_ + 24 * kPage, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      base_ + 24 * kPage);
}

TEST_F(MappingProbesTest, UnmappedAddressHasNoExtent) {
  ASSERT_EQ(munmap(base_ + 24 * kPage, kPage), 0);
  MappingExtent m;
  EXPECT_FALSE(FindMappingExtent(At(24), At(24), &m));
  ASSERT_EQ(
      mmap(base_ + 24 * kPage, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      base_ + 24 * kPage);
}

TEST_F(MappingProbesTest, ResidentEndStopsAtTheFirstUntouchedPage) {
  for (size_t p = 16; p < 26; ++p) base_[p * kPage] = 1;
  EXPECT_EQ(ResidentEnd(At(16), At(32), kPage), At(26));
  EXPECT_EQ(ResidentEnd(At(16), At(20), kPage), At(20)) << "never past the limit";
}

TEST_F(MappingProbesTest, ResidentStartStopsAtTheFirstUntouchedPageBelow) {
  for (size_t p = 22; p < 32; ++p) base_[p * kPage] = 1;
  EXPECT_EQ(ResidentStart(At(32), At(16), kPage), At(22));
}

TEST_F(MappingProbesTest, ResidencyStopsAtUnmappedMemory) {
  for (size_t p = 16; p < 32; ++p) base_[p * kPage] = 1;
  ASSERT_EQ(munmap(base_ + 27 * kPage, kPage), 0);
  EXPECT_EQ(ResidentEnd(At(18), At(32), kPage), At(27));
  EXPECT_EQ(ResidentStart(At(31), At(16), kPage), At(28));
  ASSERT_EQ(
      mmap(base_ + 27 * kPage, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      base_ + 27 * kPage);
}

}  // namespace
}  // namespace mrcache
