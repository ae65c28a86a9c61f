// sparse_scatter_plan: where each rank's run of union values starts, and this rank's chunk of the
// union bitmap, against a bit-by-bit count (chunks that do and do not start on a word).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/coll/reduce_scatter.h"

namespace sketchccl::coll {
namespace {

bool bit(const std::vector<uint64_t>& bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

TEST(SparseScatterPlan, BoundsAndChunkBitsMatchABitByBitCount) {
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
        RingLink link;
        link.rank = r;
        link.nranks = p;
        const SparseScatterPlan plan = sparse_scatter_plan(bits.data(), count, link);
        ASSERT_EQ(plan.bounds.size(), static_cast<size_t>(p) + 1);
        EXPECT_EQ(plan.chunk_count, recvcount);
        size_t set = 0;
        for (int c = 0; c <= p; ++c) {
          EXPECT_EQ(plan.bounds[static_cast<size_t>(c)], set) << "chunk " << c;
          if (c == p) break;
          for (size_t i = 0; i < recvcount; ++i)
            set += bit(bits, static_cast<size_t>(c) * recvcount + i) ? 1 : 0;
        }
        for (size_t i = 0; i < recvcount; ++i) {
          EXPECT_EQ(bit(plan.chunk_bits, i), bit(bits, static_cast<size_t>(r) * recvcount + i))
              << "element " << i;
        }
      }
    }
  }
}

TEST(ScatterChunkFirst, IsRankTimesRecvcount) {
  RingLink link;
  link.rank = 2;
  link.nranks = 4;
  EXPECT_EQ(scatter_chunk_first(4000, link), 2000u);
  EXPECT_EQ(scatter_link(link, kPhaseScatterCodec).phase, kPhaseScatterCodec);
}

}  // namespace
}  // namespace sketchccl::coll
