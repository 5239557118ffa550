// Tests of IntervalTree<V>: the half-open overlap query, duplicate starts,
// erase, visit order, and a seeded differential test against a brute-force
// model, with CheckInvariants after every operation.
#include "mrcache/core/interval_tree.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace mrcache {
namespace {

// Values are pointers into one array, as the cache stores Region*.
using Tree = IntervalTree<const int*>;
using Entry = std::tuple<uintptr_t, uintptr_t, const int*>;

std::array<int, 1024> g_slots;

const int* Slot(size_t i) { return &g_slots.at(i); }

std::vector<Entry> Overlaps(const Tree& tree, uintptr_t start, uintptr_t end) {
  std::vector<Entry> out;
  tree.ForEachOverlap(start, end,
                      [&](uintptr_t s, uintptr_t e, const int* v) { out.emplace_back(s, e, v); });
  return out;
}

std::vector<Entry> Covering(const Tree& tree, uintptr_t start, uintptr_t end) {
  std::vector<Entry> out;
  tree.FindCovering(start, end, [&](uintptr_t s, uintptr_t e, const int* v) {
    out.emplace_back(s, e, v);
    return false;  // all of them
  });
  return out;
}

std::vector<Entry> All(const Tree& tree) {
  std::vector<Entry> out;
  tree.ForEach([&](uintptr_t s, uintptr_t e, const int* v) { out.emplace_back(s, e, v); });
  return out;
}

// Orders entries as the tree visits them: by start, then by value.
bool VisitOrder(const Entry& a, const Entry& b) {
  if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) < std::get<0>(b);
  return std::less<const int*>()(std::get<2>(a), std::get<2>(b));
}

TEST(IntervalTreeTest, EmptyTreeHoldsNothing) {
  Tree tree;
  EXPECT_TRUE(tree.empty());
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_TRUE(Overlaps(tree, 0, UINTPTR_MAX).empty());
  EXPECT_TRUE(All(tree).empty());
  EXPECT_FALSE(tree.Erase(0, Slot(0)));
  EXPECT_TRUE(tree.CheckInvariants());
}

TEST(IntervalTreeTest, QueryFindsEveryIntervalItOverlaps) {
  Tree tree;
  tree.Insert(10, 20, Slot(0));
  tree.Insert(30, 40, Slot(1));
  EXPECT_FALSE(tree.empty());
  EXPECT_EQ(tree.size(), 2u);
  EXPECT_EQ(Overlaps(tree, 15, 16), (std::vector<Entry>{{10, 20, Slot(0)}}));
  EXPECT_EQ(Overlaps(tree, 0, 11), (std::vector<Entry>{{10, 20, Slot(0)}}));
  EXPECT_EQ(Overlaps(tree, 19, 31), (std::vector<Entry>{{10, 20, Slot(0)}, {30, 40, Slot(1)}}));
  EXPECT_EQ(Overlaps(tree, 0, 1000), (std::vector<Entry>{{10, 20, Slot(0)}, {30, 40, Slot(1)}}));
  EXPECT_TRUE(Overlaps(tree, 22, 28).empty());
  EXPECT_TRUE(Overlaps(tree, 50, 60).empty());
  EXPECT_TRUE(tree.CheckInvariants());
}

TEST(IntervalTreeTest, TouchingIntervalsDoNotOverlap) {
  Tree tree;
  tree.Insert(0, 10, Slot(0));
  tree.Insert(10, 20, Slot(1));
  EXPECT_EQ(Overlaps(tree, 9, 10), (std::vector<Entry>{{0, 10, Slot(0)}}));
  EXPECT_EQ(Overlaps(tree, 10, 11), (std::vector<Entry>{{10, 20, Slot(1)}}));
  EXPECT_TRUE(Overlaps(tree, 20, 30).empty());
  EXPECT_EQ(Overlaps(tree, 9, 11), (std::vector<Entry>{{0, 10, Slot(0)}, {10, 20, Slot(1)}}));
}

TEST(IntervalTreeTest, EmptyQueryOverlapsNothing) {
  Tree tree;
  tree.Insert(10, 20, Slot(0));
  EXPECT_TRUE(Overlaps(tree, 15, 15).empty());
  EXPECT_TRUE(Overlaps(tree, 16, 15).empty());
}

TEST(IntervalTreeTest, IntervalsMayShareAStart) {
  Tree tree;
  tree.Insert(100, 300, Slot(2));
  tree.Insert(100, 200, Slot(0));
  tree.Insert(100, 150, Slot(1));
  EXPECT_EQ(tree.size(), 3u);
  EXPECT_TRUE(tree.CheckInvariants());
  // Ties on start are visited in value order.
  EXPECT_EQ(Overlaps(tree, 120, 121),
            (std::vector<Entry>{{100, 200, Slot(0)}, {100, 150, Slot(1)}, {100, 300, Slot(2)}}));
  EXPECT_EQ(Overlaps(tree, 160, 161),
            (std::vector<Entry>{{100, 200, Slot(0)}, {100, 300, Slot(2)}}));
  EXPECT_TRUE(tree.Erase(100, Slot(0)));
  EXPECT_EQ(Overlaps(tree, 0, 1000),
            (std::vector<Entry>{{100, 150, Slot(1)}, {100, 300, Slot(2)}}));
  EXPECT_TRUE(tree.CheckInvariants());
}

TEST(IntervalTreeTest, EraseRemovesThePresentInterval) {
  Tree tree;
  tree.Insert(10, 20, Slot(0));
  tree.Insert(30, 40, Slot(1));
  tree.Insert(50, 60, Slot(2));
  EXPECT_TRUE(tree.Erase(30, Slot(1)));
  EXPECT_EQ(tree.size(), 2u);
  EXPECT_TRUE(Overlaps(tree, 30, 40).empty());
  EXPECT_EQ(All(tree), (std::vector<Entry>{{10, 20, Slot(0)}, {50, 60, Slot(2)}}));
  EXPECT_TRUE(tree.CheckInvariants());
}

TEST(IntervalTreeTest, EraseOfAnAbsentIntervalReturnsFalse) {
  Tree tree;
  tree.Insert(10, 20, Slot(0));
  EXPECT_FALSE(tree.Erase(10, Slot(1)));  // Right start, other value.
  EXPECT_FALSE(tree.Erase(11, Slot(0)));  // Right value, other start.
  EXPECT_TRUE(tree.Erase(10, Slot(0)));
  EXPECT_FALSE(tree.Erase(10, Slot(0)));  // Already erased.
  EXPECT_TRUE(tree.empty());
  EXPECT_TRUE(tree.CheckInvariants());
}

TEST(IntervalTreeTest, OverlapsAreVisitedInIncreasingStartOrder) {
  Tree tree;
  // Nested and staggered intervals, inserted out of order.
  const std::vector<Entry> inserted = {{50, 55, Slot(0)}, {0, 100, Slot(1)}, {40, 90, Slot(2)},
                                       {10, 20, Slot(3)}, {45, 46, Slot(4)}, {60, 200, Slot(5)},
                                       {5, 48, Slot(6)},  {70, 71, Slot(7)}, {30, 31, Slot(8)}};
  for (const Entry& e : inserted) {
    tree.Insert(std::get<0>(e), std::get<1>(e), std::get<2>(e));
  }
  std::vector<Entry> visited = Overlaps(tree, 44, 61);
  EXPECT_EQ(visited, (std::vector<Entry>{{0, 100, Slot(1)},
                                         {5, 48, Slot(6)},
                                         {40, 90, Slot(2)},
                                         {45, 46, Slot(4)},
                                         {50, 55, Slot(0)},
                                         {60, 200, Slot(5)}}));
}

TEST(IntervalTreeTest, ForEachVisitsEveryIntervalInStartOrder) {
  Tree tree;
  tree.Insert(30, 31, Slot(0));
  tree.Insert(10, 500, Slot(1));
  tree.Insert(20, 21, Slot(2));
  EXPECT_EQ(All(tree),
            (std::vector<Entry>{{10, 500, Slot(1)}, {20, 21, Slot(2)}, {30, 31, Slot(0)}}));
}

TEST(IntervalTreeTest, ClearRemovesEveryInterval) {
  Tree tree;
  for (size_t i = 0; i < 100; ++i) tree.Insert(i, i + 10, Slot(i));
  tree.Clear();
  EXPECT_TRUE(tree.empty());
  EXPECT_TRUE(All(tree).empty());
  EXPECT_TRUE(tree.CheckInvariants());
  tree.Insert(1, 2, Slot(0));  // Still usable after Clear.
  EXPECT_EQ(tree.size(), 1u);
}

TEST(IntervalTreeTest, ValuesNeedOnlyBeCopyableAndOrdered) {
  IntervalTree<std::string> tree;
  tree.Insert(0, 10, "b");
  tree.Insert(0, 5, "a");
  std::vector<std::string> seen;
  tree.ForEachOverlap(2, 3, [&](uintptr_t, uintptr_t, std::string v) { seen.push_back(v); });
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(tree.Erase(0, "a"));
  EXPECT_FALSE(tree.Erase(0, "a"));
  EXPECT_TRUE(tree.CheckInvariants());
}

// A seeded random mix of inserts, erases (present and absent) and queries;
// after every operation the tree must answer a random query exactly as a
// brute-force scan of a vector does, and keep every invariant.
TEST(IntervalTreeTest, RandomOperationsMatchABruteForceModel) {
  constexpr int kOperations = 30000;
  constexpr uintptr_t kSpace = 2000;  // Small, so starts often coincide.
  std::mt19937_64 rng(20261129);
  auto uniform = [&](uintptr_t lo, uintptr_t hi) {  // In [lo, hi].
    return std::uniform_int_distribution<uintptr_t>(lo, hi)(rng);
  };
  Tree tree;
  std::vector<Entry> model;
  std::vector<uintptr_t> start_of(g_slots.size(), 0);
  std::vector<bool> live(g_slots.size(), false);
  auto random_interval = [&]() {
    const uintptr_t start = uniform(0, kSpace);
    // Mostly short intervals, sometimes a long one spanning many others.
    const uintptr_t length = uniform(0, 9) == 0 ? uniform(1, kSpace) : uniform(1, 40);
    return std::make_pair(start, start + length);
  };
  size_t inserts = 0, erases = 0, absent_erases = 0, hits = 0, covering_found = 0;
  for (int op = 0; op < kOperations; ++op) {
    const size_t slot = uniform(0, g_slots.size() - 1);
    const uintptr_t kind = uniform(0, 9);
    if (kind < 5 && !live[slot]) {
      auto [start, end] = random_interval();
      tree.Insert(start, end, Slot(slot));
      model.emplace_back(start, end, Slot(slot));
      start_of[slot] = start;
      live[slot] = true;
      ++inserts;
    } else if (kind < 8 && live[slot]) {
      ASSERT_TRUE(tree.Erase(start_of[slot], Slot(slot)));
      model.erase(std::find_if(model.begin(), model.end(),
                               [&](const Entry& e) { return std::get<2>(e) == Slot(slot); }));
      live[slot] = false;
      ++erases;
    } else if (kind < 8) {
      // The slot is not in the tree under any start.
      ASSERT_FALSE(tree.Erase(uniform(0, kSpace), Slot(slot)));
      ++absent_erases;
    } else if (live[slot]) {
      // Present value under a wrong start.
      ASSERT_FALSE(tree.Erase(start_of[slot] + 1 + uniform(0, 5), Slot(slot)));
      ++absent_erases;
    }
    auto [qstart, qend] = random_interval();
    std::vector<Entry> expected;
    for (const Entry& e : model) {
      if (std::get<0>(e) < qend && std::get<1>(e) > qstart) {
        expected.push_back(e);
      }
    }
    std::sort(expected.begin(), expected.end(), VisitOrder);
    ASSERT_EQ(Overlaps(tree, qstart, qend), expected)
        << "operation " << op << ", query [" << qstart << ", " << qend << ")";
    std::vector<Entry> covering;
    for (const Entry& e : expected) {
      if (std::get<0>(e) <= qstart && qend <= std::get<1>(e)) covering.push_back(e);
    }
    ASSERT_EQ(Covering(tree, qstart, qend), covering)
        << "operation " << op << ", covering [" << qstart << ", " << qend << ")";
    covering_found += covering.size();
    ASSERT_EQ(tree.size(), model.size()) << "operation " << op;
    ASSERT_TRUE(tree.CheckInvariants()) << "operation " << op;
    hits += expected.size();
  }
  // The mix really exercised every path.
  EXPECT_GT(inserts, 1000u);
  EXPECT_GT(erases, 1000u);
  EXPECT_GT(absent_erases, 1000u);
  EXPECT_GT(hits, static_cast<size_t>(kOperations));
  EXPECT_GT(covering_found, 1000u);
  std::sort(model.begin(), model.end(), VisitOrder);
  EXPECT_EQ(All(tree), model);
}

TEST(IntervalTreeTest, CoveringQueryStopsWhenTheVisitorSaysSo) {
  Tree tree;
  tree.Insert(0, 100, Slot(0));
  tree.Insert(10, 50, Slot(1));
  tree.Insert(20, 30, Slot(2));
  tree.Insert(25, 26, Slot(3));  // inside the query: overlaps, does not cover
  std::vector<const int*> seen;
  EXPECT_TRUE(tree.FindCovering(22, 28, [&](uintptr_t, uintptr_t, const int* v) {
    seen.push_back(v);
    return v == Slot(1);
  }));
  EXPECT_EQ(seen, (std::vector<const int*>{Slot(0), Slot(1)}));
  EXPECT_FALSE(tree.FindCovering(95, 105, [](uintptr_t, uintptr_t, const int*) { return true; }));
}

TEST(IntervalTreeTest, FindLastStartingAtOrBeforeFindsThePredecessorByStart) {
  Tree tree;
  uintptr_t s = 0, e = 0;
  const int* v = nullptr;
  EXPECT_FALSE(tree.FindLastStartingAtOrBefore(100, &s, &e, &v)) << "empty tree";
  tree.Insert(10, 20, Slot(0));
  tree.Insert(30, 90, Slot(1));
  tree.Insert(30, 35, Slot(2));
  tree.Insert(50, 60, Slot(3));
  EXPECT_FALSE(tree.FindLastStartingAtOrBefore(9, &s, &e, &v)) << "everything starts later";
  ASSERT_TRUE(tree.FindLastStartingAtOrBefore(10, &s, &e, &v));
  EXPECT_EQ(Entry(s, e, v), Entry(10, 20, Slot(0))) << "a start equal to `at` counts";
  ASSERT_TRUE(tree.FindLastStartingAtOrBefore(25, &s, &e, &v));
  EXPECT_EQ(Entry(s, e, v), Entry(10, 20, Slot(0))) << "even if it ends before `at`";
  ASSERT_TRUE(tree.FindLastStartingAtOrBefore(40, &s, &e, &v));
  const Entry last_at_30 = std::max(Entry(30, 90, Slot(1)), Entry(30, 35, Slot(2)), VisitOrder);
  EXPECT_EQ(Entry(s, e, v), last_at_30) << "the last in visit order among equal starts";
  ASSERT_TRUE(tree.FindLastStartingAtOrBefore(UINTPTR_MAX, &s, &e, &v));
  EXPECT_EQ(Entry(s, e, v), Entry(50, 60, Slot(3)));
}

TEST(IntervalTreeTest, FindLastStartingAtOrBeforeMatchesABruteForceModel) {
  std::mt19937_64 rng(20261130);
  Tree tree;
  for (size_t i = 0; i < 500; ++i) {
    const uintptr_t start = rng() % 5000;
    tree.Insert(start, start + 1 + rng() % 100, Slot(i));
  }
  const std::vector<Entry> model = All(tree);  // in visit order (ForEach is tested above)
  for (uintptr_t at = 0; at < 5200; at += 7) {
    const Entry* want = nullptr;
    for (const Entry& entry : model) {  // in visit order: the last one <= at wins
      if (std::get<0>(entry) <= at) want = &entry;
    }
    uintptr_t s = 0, e = 0;
    const int* v = nullptr;
    const bool found = tree.FindLastStartingAtOrBefore(at, &s, &e, &v);
    ASSERT_EQ(found, want != nullptr) << "at " << at;
    if (found) {
      ASSERT_EQ(Entry(s, e, v), *want) << "at " << at;
    }
  }
}

// Ascending inserts would make an unbalanced BST a 100k-deep list; the AVL
// invariant (checked by CheckInvariants) bounds the height at ~1.44 log2 n.
TEST(IntervalTreeTest, LargeTreeStaysBalanced) {
  constexpr size_t kCount = 100000;
  std::vector<int> values(kCount);
  Tree tree;
  for (size_t i = 0; i < kCount; ++i) {
    tree.Insert(i * 10, i * 10 + 15, &values[i]);
  }
  ASSERT_EQ(tree.size(), kCount);
  ASSERT_TRUE(tree.CheckInvariants());
  // [i*10, i*10+15) overlaps its neighbours: a point query sees two.
  std::vector<Entry> found = Overlaps(tree, 500012, 500013);
  EXPECT_EQ(found, (std::vector<Entry>{{500000, 500015, &values[50000]},
                                       {500010, 500025, &values[50001]}}));
  for (size_t i = 0; i < kCount; i += 2) {
    ASSERT_TRUE(tree.Erase(i * 10, &values[i]));
  }
  EXPECT_EQ(tree.size(), kCount / 2);
  EXPECT_TRUE(tree.CheckInvariants());
  EXPECT_EQ(Overlaps(tree, 500012, 500013), (std::vector<Entry>{{500010, 500025, &values[50001]}}));
}

TEST(IntervalTreeTest, PreparedNodesInsertAndDetachWithoutAllocatingInside) {
  IntervalTree<int> tree;
  auto* a = IntervalTree<int>::AllocateNode();
  auto* b = IntervalTree<int>::AllocateNode();
  tree.InsertNode(a, 10, 20, 1);
  tree.InsertNode(b, 15, 30, 2);
  EXPECT_EQ(tree.size(), 2u);
  EXPECT_TRUE(tree.CheckInvariants());
  EXPECT_EQ(tree.DetachNode(10, 1), a);
  EXPECT_EQ(tree.DetachNode(10, 1), nullptr);
  EXPECT_EQ(tree.size(), 1u);
  EXPECT_TRUE(tree.CheckInvariants());
  IntervalTree<int>::FreeNode(a);
}

}  // namespace
}  // namespace mrcache
