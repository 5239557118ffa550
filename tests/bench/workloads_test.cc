// Built-in workloads: deterministic by seed, valid, and of the requested size.
#include "bench/workloads.h"

#include "gtest/gtest.h"

namespace mrbench {
namespace {

WorkloadParams Params(uint64_t seed) {
  WorkloadParams p;
  p.seed = seed;
  p.ops = 3000;
  p.max_regions = 64;
  return p;
}

class EachWorkload : public ::testing::TestWithParam<std::string> {};

TEST_P(EachWorkload, SameSeedSameTrace) {
  absl::StatusOr<Trace> a = MakeWorkload(GetParam(), Params(7));
  absl::StatusOr<Trace> b = MakeWorkload(GetParam(), Params(7));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(FormatTrace(*a), FormatTrace(*b));
}

TEST_P(EachWorkload, DifferentSeedDifferentTrace) {
  absl::StatusOr<Trace> a = MakeWorkload(GetParam(), Params(7));
  absl::StatusOr<Trace> b = MakeWorkload(GetParam(), Params(8));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(FormatTrace(*a), FormatTrace(*b));
}

TEST_P(EachWorkload, IsValidHasOpsTransfersAndFreesEverything) {
  absl::StatusOr<Trace> t = MakeWorkload(GetParam(), Params(3));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(ValidateTrace(*t).ok()) << ValidateTrace(*t);
  EXPECT_EQ(t->transfers(), 3000u);
  size_t allocs = 0, frees = 0;
  for (const TraceOp& op : t->ops)
    allocs += op.kind == TraceOp::kAlloc, frees += op.kind == TraceOp::kFree;
  EXPECT_EQ(allocs, frees);
  EXPECT_EQ(t->name, GetParam());
}

TEST_P(EachWorkload, TextFormParsesBackToTheSameTrace) {
  absl::StatusOr<Trace> t = MakeWorkload(GetParam(), Params(5));
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Trace> parsed = ParseTrace(FormatTrace(*t), GetParam());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(FormatTrace(*parsed), FormatTrace(*t));
}

INSTANTIATE_TEST_SUITE_P(Workloads, EachWorkload, ::testing::ValuesIn(WorkloadNames()));

TEST(Workloads, UnknownNameListsTheKnownOnes) {
  absl::StatusOr<Trace> t = MakeWorkload("nope", Params(1));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "unknown workload 'nope' (known: pingpong, ring, churn, zipf, kv) (Invalid argument)");
}

TEST(Workloads, ZeroOpsIsAnError) {
  WorkloadParams p = Params(1);
  p.ops = 0;
  EXPECT_FALSE(MakeWorkload("zipf", p).ok());
}

TEST(Workloads, ChurnFreesAndAllocatesAsItGoes) {
  absl::StatusOr<Trace> t = MakeWorkload("churn", Params(1));
  ASSERT_TRUE(t.ok());
  size_t last_alloc = 0, frees_before_last_alloc = 0;
  for (size_t i = 0; i < t->ops.size(); ++i) {
    if (t->ops[i].kind == TraceOp::kAlloc) last_alloc = i;
  }
  for (size_t i = 0; i < last_alloc; ++i)
    frees_before_last_alloc += t->ops[i].kind == TraceOp::kFree;
  EXPECT_GT(frees_before_last_alloc, 100u);
}

}  // namespace
}  // namespace mrbench
