// size_classes_test.cc: SizeClassLists (mrcache/core/size_classes.h) groups
// items by quarter-power-of-two size classes and walks them from the largest
// class down, oldest first in each class.
#include "mrcache/core/size_classes.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
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

// Random pushes, removals and walks (some removing what they visit) over
// sizes from 1 byte to SIZE_MAX, against a plain model: the items listed,
// ordered by class (largest first) and then by when they were pushed.
TEST(SizeClassesTest, MatchesAModelUnderRandomOperations) {
  struct Modelled {
    int id = 0;
    size_t bytes = 0;
    uint64_t pushed = 0;
    Modelled* size_prev = nullptr;
    Modelled* size_next = nullptr;
    int16_t size_class = -1;
  };
  constexpr int kItems = 300;
  std::vector<Modelled> items(kItems);
  for (int i = 0; i < kItems; ++i) items[i].id = i;
  std::vector<int> listed;
  SizeClassLists<Modelled> lists;
  std::mt19937_64 rng(7);
  auto random_bytes = [&rng]() -> size_t {
    switch (rng() % 4) {
      case 0:
        return 1 + rng() % 8;
      case 1:
        return size_t{1} << (rng() % 64);
      case 2:
        return (size_t{1} << (15 + rng() % 3)) + rng() % 5;  // classes 60-71: two bitmask words
      default:
        return rng() | 1;
    }
  };
  auto unlist = [&listed](int id) { listed.erase(std::find(listed.begin(), listed.end(), id)); };
  uint64_t pushes = 0;
  for (int step = 0; step < 50000; ++step) {
    Modelled& item = items[rng() % kItems];
    switch (rng() % 3) {
      case 0:
        if (SizeClassLists<Modelled>::Contains(&item)) break;
        item.bytes = random_bytes();
        item.pushed = ++pushes;
        lists.PushNewest(&item, item.bytes);
        listed.push_back(item.id);
        break;
      case 1:
        if (SizeClassLists<Modelled>::Contains(&item)) unlist(item.id);
        lists.Remove(&item);
        break;
      default: {
        const int lowest = static_cast<int>(rng() % SizeClassLists<Modelled>::kClasses);
        std::vector<int> expected;
        for (int id : listed) {
          if (SizeClassLists<Modelled>::ClassOf(items[id].bytes) >= lowest) expected.push_back(id);
        }
        std::sort(expected.begin(), expected.end(), [&items](int a, int b) {
          const int ca = SizeClassLists<Modelled>::ClassOf(items[a].bytes);
          const int cb = SizeClassLists<Modelled>::ClassOf(items[b].bytes);
          return ca != cb ? ca > cb : items[a].pushed < items[b].pushed;
        });
        const bool removing = rng() % 2 == 0;
        std::vector<int> walked;
        lists.ForEachFromLargest(lowest, [&](Modelled* visited) {
          walked.push_back(visited->id);
          if (removing && rng() % 3 == 0) {
            lists.Remove(visited);
            unlist(visited->id);
          }
          return false;
        });
        ASSERT_EQ(walked, expected) << "step " << step;
      }
    }
    ASSERT_EQ(lists.size(), listed.size()) << "step " << step;
  }
}

}  // namespace
}  // namespace mrcache
