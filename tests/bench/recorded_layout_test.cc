// Where a recorded trace's addresses are replayed: the recorded layout,
// translated by a constant per cluster, aligned as recorded.
#include "bench/recorded_layout.h"

#include <cstring>

#include "gtest/gtest.h"

namespace mrbench {
namespace {

Trace Recorded(const std::string& events) {
  absl::StatusOr<Trace> t = ParseTrace("# mrcache-record 1\n" + events, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace{};
}

uint64_t Addr(const char* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(RecordedLayout, KeepsOffsetsAndAlignmentModuloTheBlock) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x7f0012345000 4096 1\nreg 2 0x7f0012400010 100 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->block(), RecordedLayout::kMinBlock);
  EXPECT_EQ(layout->clusters(), 1u);
  char* a = layout->Translate(0x7f0012345000);
  char* b = layout->Translate(0x7f0012400010);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Addr(b) - Addr(a), 0x7f0012400010u - 0x7f0012345000u);
  EXPECT_EQ(Addr(a) % layout->block(), 0x7f0012345000u % layout->block());
}

TEST(RecordedLayout, KeepsAddressesModuloWhatTheCacheHashes) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x55d312345010 4096 1\nreg 2 0x7f3a9b400010 100 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->modulus(), uint64_t{1} << mrcache::kHashedAddressBits);
  EXPECT_EQ(mrcache::HashedAddress(Addr(layout->Translate(0x55d312345010))),
            mrcache::HashedAddress(0x55d312345010));
  EXPECT_EQ(mrcache::HashedAddress(Addr(layout->Translate(0x7f3a9b400010))),
            mrcache::HashedAddress(0x7f3a9b400010));
}

TEST(RecordedLayout, FarApartRegistrationsGetSeparateClusters) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x555500001000 4096 1\nreg 2 0x7f0000001000 4096 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->clusters(), 2u);
  EXPECT_EQ(Addr(layout->Translate(0x555500001000)) % layout->block(),
            0x555500001000u % layout->block());
  EXPECT_EQ(Addr(layout->Translate(0x7f0000001000)) % layout->block(),
            0x7f0000001000u % layout->block());
}

TEST(RecordedLayout, MappedMemoryIsWritable) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x7f0000001000 20000 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  char* p = layout->Translate(0x7f0000001000);
  layout->Touch(p, 20000);
  std::memset(p, 0x5a, 20000);
  EXPECT_EQ(p[19999], 0x5a);
}

TEST(RecordedLayout, DiscardGivesFreshZeroPages) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x7f0000000000 65536 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  char* p = layout->Translate(0x7f0000000000);
  std::memset(p, 0x5a, 65536);
  std::vector<RecordedLayout::Piece> pieces = layout->Clip(0x7f0000004000, 8192);
  ASSERT_EQ(pieces.size(), 1u);
  layout->Discard(pieces[0]);
  EXPECT_EQ(p[0x4000], 0);
  EXPECT_EQ(p[0x5fff], 0);
  EXPECT_EQ(p[0x3fff], 0x5a);
  EXPECT_EQ(p[0x6000], 0x5a);
}

TEST(RecordedLayout, ClipTranslatesTheOverlapAndDropsTheRest) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("reg 1 0x7f0000001000 4096 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_TRUE(layout->Clip(0x1000, 4096).empty());
  // The cluster spans the whole block (1 GiB) around the registration.
  std::vector<RecordedLayout::Piece> pieces = layout->Clip(0x7f0000000000 - 4096, 3 * 4096);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].addr, layout->Translate(0x7f0000000000));
  EXPECT_EQ(pieces[0].length, 2u * 4096);
}

TEST(RecordedLayout, RecordedBridgeBytesAboveAGigabyteWidenTheBlock) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("config bridge_bytes=2G\nreg 1 0x7f0040001000 4096 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->block(), uint64_t{2} << 30);
  EXPECT_EQ(Addr(layout->Translate(0x7f0040001000)) % layout->block(),
            0x7f0040001000u % (uint64_t{2} << 30));
}

TEST(RecordedLayout, RecordedBridgeBytesAboveTheModulusWidenIt) {
  absl::StatusOr<RecordedLayout> layout =
      RecordedLayout::Map(Recorded("config bridge_bytes=128G\nreg 1 0x7f0040001000 4096 1\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->modulus(), uint64_t{128} << 30);
  EXPECT_EQ(Addr(layout->Translate(0x7f0040001000)) % layout->modulus(),
            0x7f0040001000u % (uint64_t{128} << 30));
}

TEST(RecordedLayout, NoRegistrationsMapsNothing) {
  absl::StatusOr<RecordedLayout> layout = RecordedLayout::Map(Recorded("release 0x1000 4096\n"));
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->clusters(), 0u);
}

}  // namespace
}  // namespace mrbench
