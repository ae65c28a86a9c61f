// The ring shapes: the ReduceScatter's plan of a ring over a subset (where each rank's run of
// union values starts, and this rank's chunk of the union bitmap) against a bit-by-bit count
// (chunks that do and do not start on a word); each shape's output range and phases.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/coll/coll_shape.h"

namespace sketchccl::coll {
namespace {

bool bit(const std::vector<uint64_t>& bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

TEST(ReduceScatterShape, SubsetPlanMatchesABitByBitCount) {
  const CollShape& shape = *coll_shape(CallKind::kReduceScatter);
  for (int p : {1, 2, 3, 5}) {
    for (size_t recvcount : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1001)}) {
      const size_t count = recvcount * static_cast<size_t>(p);
      std::vector<uint64_t> bits((count + 63) / 64 + 1, 0);
      uint64_t h = 12345;
      for (size_t i = 0; i < count; ++i) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        if ((h >> 60) < 5) bits[i / 64] |= uint64_t(1) << (i % 64);
      }
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(::testing::Message()
                     << p << " ranks, recvcount " << recvcount << ", rank " << r);
        CommLink link;
        link.rank = r;
        link.nranks = p;
        const SubsetPlan plan = shape.subset_plan(bits.data(), count, link);
        ASSERT_EQ(plan.bounds.size(), static_cast<size_t>(p) + 1);
        EXPECT_EQ(plan.out_count, recvcount);
        EXPECT_EQ(plan.values_first, plan.bounds[static_cast<size_t>(r)]);
        size_t set = 0;
        for (int c = 0; c <= p; ++c) {
          EXPECT_EQ(plan.bounds[static_cast<size_t>(c)], set) << "chunk " << c;
          if (c == p) break;
          for (size_t i = 0; i < recvcount; ++i)
            set += bit(bits, static_cast<size_t>(c) * recvcount + i) ? 1 : 0;
        }
        for (size_t i = 0; i < recvcount; ++i) {
          EXPECT_EQ(bit(plan.own_bits, i), bit(bits, static_cast<size_t>(r) * recvcount + i))
              << "element " << i;
        }
      }
    }
  }
}

TEST(ReduceScatterShape, OutputIsThisRanksChunk) {
  const CollShape& shape = *coll_shape(CallKind::kReduceScatter);
  CommLink link;
  link.rank = 2;
  link.nranks = 4;
  EXPECT_EQ(shape.out_first(4000, link), 2000u);
  EXPECT_EQ(shape.out_count(4000, link), 1000u);
  EXPECT_FALSE(shape.whole_result());
  EXPECT_EQ(shape.phase(Stage::kData), 4u);  // the wire's numbers
  EXPECT_EQ(shape.phase(Stage::kSupport), 5u);
  EXPECT_EQ(shape.phase(Stage::kValues), 6u);
  EXPECT_STREQ(shape.name(), "ReduceScatter");
}

TEST(AllReduceShape, OutputIsTheWholeBufferAndAnyCutOfASubset) {
  const CollShape& shape = *coll_shape(CallKind::kAllReduce);
  CommLink link;
  link.rank = 1;
  link.nranks = 3;
  EXPECT_EQ(shape.out_first(1001, link), 0u);
  EXPECT_EQ(shape.out_count(1001, link), 1001u);
  EXPECT_TRUE(shape.whole_result());
  EXPECT_EQ(shape.phase(Stage::kData), 0u);
  EXPECT_EQ(shape.phase(Stage::kSupport), 1u);
  EXPECT_EQ(shape.phase(Stage::kValues), 2u);
  const std::vector<uint64_t> bits = {0x5, 0x1};
  const SubsetPlan plan = shape.subset_plan(bits.data(), 100, link);
  EXPECT_TRUE(plan.bounds.empty());
  EXPECT_EQ(plan.out_bits(bits.data()), bits.data());
  EXPECT_EQ(plan.out_count, 100u);
  EXPECT_EQ(plan.values_first, 0u);
  EXPECT_STREQ(shape.name(), "AllReduce");
}

TEST(RingShapes, ARailCallHasNoFlatShape) {
  EXPECT_EQ(coll_shape(CallKind::kRail), nullptr);
}

}  // namespace
}  // namespace sketchccl::coll
