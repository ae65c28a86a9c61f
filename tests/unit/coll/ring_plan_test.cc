#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "src/coll/ring.h"

namespace sketchccl::coll {
namespace {

// Every element lands in exactly one slice of one chunk, in order, chunk sizes differ by <= 1.
TEST(RingPlan, SlicesCoverTheBufferExactlyOnce) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{1048579}}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (size_t slice : {size_t{1}, size_t{7}, size_t{4096}}) {
        if (count / slice > 200000) continue;
        RingPlan plan(count, p, slice);
        std::vector<int> seen(count, 0);
        size_t min_len = count, max_len = 0;
        for (int c = 0; c < p; ++c) {
          min_len = std::min(min_len, plan.chunk_len(c));
          max_len = std::max(max_len, plan.chunk_len(c));
          EXPECT_LE(plan.slices(c), plan.max_slices());
          for (int j = 0; j < plan.max_slices(); ++j) {
            size_t off = 0, n = 0;
            plan.slice(c, j, &off, &n);
            EXPECT_EQ(n > 0, j < plan.slices(c));
            EXPECT_LE(n, slice);
            for (size_t i = off; i < off + n; ++i)
              seen[i]++;
          }
        }
        EXPECT_LE(max_len - min_len, 1u) << count << " " << p;
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(seen[i], 1) << count << " " << p << " " << i;
        EXPECT_EQ(plan.chunk_offset(p), count);
      }
    }
  }
}

// The AllReduce's cut: every chunk and slice starts at a multiple of 64 elements (so the codec
// kernels take their 16-byte paths), chunks differ by at most 64 elements, every element is
// covered once, and the cut is a function of (count, P, slice) alone, so every rank agrees.
TEST(RingPlan, AlignedCutStartsEverySliceAtAMultipleOf64) {
  for (size_t count : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4099},
                       size_t{262147}, size_t{1048579}}) {
    for (int p : {1, 2, 3, 4, 7, 8}) {
      for (size_t slice : {size_t{1}, size_t{100}, size_t{4096}}) {
        if (count / slice > 200000) continue;
        RingPlan plan(count, p, slice, kRingChunkAlign);
        RingPlan again(count, p, slice, kRingChunkAlign);
        std::vector<int> seen(count, 0);
        size_t min_len = count, max_len = 0;
        for (int c = 0; c < p; ++c) {
          ASSERT_EQ(plan.chunk_offset(c), again.chunk_offset(c));
          EXPECT_TRUE(plan.chunk_offset(c) % 64 == 0 || plan.chunk_offset(c) == count)
              << count << " " << p << " chunk " << c;
          min_len = std::min(min_len, plan.chunk_len(c));
          max_len = std::max(max_len, plan.chunk_len(c));
          for (int j = 0; j < plan.max_slices(); ++j) {
            size_t off = 0, n = 0;
            plan.slice(c, j, &off, &n);
            EXPECT_EQ(n > 0, j < plan.slices(c));
            if (n == 0) continue;
            EXPECT_EQ(off % 64, 0u) << count << " " << p << " " << c << " " << j;
            EXPECT_LE(n, (slice + 63) / 64 * 64);
            for (size_t i = off; i < off + n; ++i)
              seen[i]++;
          }
        }
        EXPECT_LE(max_len - min_len, 64u) << count << " " << p;
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(seen[i], 1) << count << " " << p << " " << i;
        EXPECT_EQ(plan.chunk_offset(p), count);
      }
    }
  }
}

TEST(RingPlan, TagsAreDistinctWithinAnOperationAndFit44Bits) {
  std::set<uint64_t> tags;
  for (int phase = 0; phase < 3; ++phase) {
    for (int step = 0; step < 14; ++step) {
      for (int slice = 0; slice < 50; ++slice) {
        uint64_t t = ring_tag(7, static_cast<uint8_t>(phase), step, slice);
        EXPECT_LT(t, 1ull << 44);
        EXPECT_TRUE(tags.insert(t).second);
      }
    }
  }
  EXPECT_NE(ring_tag(1, 0, 0, 0), ring_tag(2, 0, 0, 0));
}

}  // namespace
}  // namespace sketchccl::coll
