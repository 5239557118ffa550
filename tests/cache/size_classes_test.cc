// size_classes_test.cc: SizeClassLists (mrcache/core/size_classes.h) groups
// items by quarter-power-of-two size classes and walks them from the largest
// class down, oldest first in each class.
#include "mrcache/core/size_classes.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

struct Item {
  int id = 0;
  Item* size_prev = nullptr;
  Item* size_next = nullptr;
  int16_t size_class = -1;
};
using Lists = SizeClassLists<Item>;

std::vector<int> Walk(const Lists& lists, int lowest = 0) {
  std::vector<int> ids;
  lists.ForEachFromLargest(lowest, [&ids](Item* item) {
    ids.push_back(item->id);
    return false;
  });
  return ids;
}

TEST(SizeClassesTest, LargerSizesNeverFallInASmallerClass) {
  int last = Lists::ClassOf(1);
  for (size_t bytes = 2; bytes < (size_t{1} << 20); bytes += bytes / 7 + 1) {
    const int c = Lists::ClassOf(bytes);
    EXPECT_GE(c, last) << bytes;
    EXPECT_LT(c, Lists::kClasses);
    last = c;
  }
  EXPECT_LT(Lists::ClassOf(SIZE_MAX), Lists::kClasses);
}

TEST(SizeClassesTest, AClassSpansAQuarterOfAPowerOfTwo) {
  EXPECT_EQ(Lists::ClassOf(64 * 1024), Lists::ClassOf(64 * 1024 + 16 * 1024 - 1));
  EXPECT_LT(Lists::ClassOf(64 * 1024), Lists::ClassOf(64 * 1024 + 16 * 1024));
  EXPECT_LT(Lists::ClassOf(64 * 1024 - 1), Lists::ClassOf(64 * 1024));
}

TEST(SizeClassesTest, WalksFromTheLargestClassDownOldestFirstInEach) {
  Item a{1}, b{2}, c{3}, d{4};
  Lists lists;
  lists.PushNewest(&a, 4096);
  lists.PushNewest(&b, 1 << 20);
  lists.PushNewest(&c, 4096);
  lists.PushNewest(&d, 1 << 20);
  EXPECT_EQ(lists.size(), 4u);
  EXPECT_EQ(Walk(lists), (std::vector<int>{2, 4, 1, 3}));
}

TEST(SizeClassesTest, TheWalkStopsAtTheLowestClassAskedFor) {
  Item a{1}, b{2};
  Lists lists;
  lists.PushNewest(&a, 4096);
  lists.PushNewest(&b, 1 << 20);
  EXPECT_EQ(Walk(lists, Lists::ClassOf(8192)), (std::vector<int>{2}));
}

TEST(SizeClassesTest, TheWalkReturnsTheItemItsVisitorChose) {
  Item a{1}, b{2}, c{3};
  Lists lists;
  lists.PushNewest(&a, 1 << 20);
  lists.PushNewest(&b, 1 << 20);
  lists.PushNewest(&c, 4096);
  Item* chosen = lists.ForEachFromLargest(0, [](Item* item) { return item->id == 2; });
  EXPECT_EQ(chosen, &b);
  EXPECT_EQ(lists.ForEachFromLargest(0, [](Item*) { return false; }), nullptr);
}

TEST(SizeClassesTest, AVisitorMayRemoveTheItemItIsGiven) {
  Item a{1}, b{2}, c{3};
  Lists lists;
  lists.PushNewest(&a, 1 << 20);
  lists.PushNewest(&b, 1 << 20);
  lists.PushNewest(&c, 4096);
  std::vector<int> seen;
  lists.ForEachFromLargest(0, [&](Item* item) {
    seen.push_back(item->id);
    lists.Remove(item);
    return false;
  });
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(lists.size(), 0u);
  EXPECT_TRUE(Walk(lists).empty());
}

TEST(SizeClassesTest, RemovingKeepsTheOrderOfTheOthers) {
  Item a{1}, b{2}, c{3};
  Lists lists;
  lists.PushNewest(&a, 8192);
  lists.PushNewest(&b, 8192);
  lists.PushNewest(&c, 8192);
  lists.Remove(&b);
  EXPECT_FALSE(Lists::Contains(&b));
  EXPECT_EQ(Walk(lists), (std::vector<int>{1, 3}));
  lists.Remove(&a);
  lists.Remove(&c);
  EXPECT_TRUE(Walk(lists).empty());
  lists.PushNewest(&b, 8192);
  EXPECT_EQ(Walk(lists), (std::vector<int>{2}));
}

TEST(SizeClassesTest, RemovingAnItemInNoListDoesNothing) {
  Item a{1}, b{2};
  Lists lists;
  lists.PushNewest(&a, 4096);
  lists.Remove(&b);
  EXPECT_EQ(lists.size(), 1u);
  EXPECT_EQ(Walk(lists), (std::vector<int>{1}));
}

TEST(SizeClassesTest, ClearForgetsEveryItem) {
  Item a{1};
  Lists lists;
  lists.PushNewest(&a, 4096);
  lists.Clear();
  EXPECT_EQ(lists.size(), 0u);
  EXPECT_TRUE(Walk(lists).empty());
}

}  // namespace
}  // namespace mrcache
