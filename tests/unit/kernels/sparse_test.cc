// The lossless sparse codec's helpers: bitmaps, compaction and scatter.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/codec_common.h"
#include "kernels/sparse.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

TEST(Sparse, BitmapBytes) {
  EXPECT_EQ(bitmap_bytes(0), 0u);
  EXPECT_EQ(bitmap_bytes(1), 8u);
  EXPECT_EQ(bitmap_bytes(64), 8u);
  EXPECT_EQ(bitmap_bytes(65), 16u);
}

TEST(Sparse, TwoPhaseIsExactAcrossRanks) {
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(1000), size_t(100003)}) {
    SCOPED_TRACE(n);
    const int P = 4;
    std::vector<std::vector<float>> xs;
    for (int r = 0; r < P; ++r)
      xs.push_back(testing::make_data(testing::Dist::kSparse1, n, r));
    if (n > 10) xs[1][5] = NAN;  // non-finite values travel as values
    std::vector<uint64_t> uni(bitmap_bytes(n) / 8 + 1, 0), local(bitmap_bytes(n) / 8 + 1);
    for (int r = 0; r < P; ++r) {
      bitmap_build(xs[r].data(), ElemType::kF32, n, local.data());
      bitmap_or(uni.data(), local.data(), n);
    }
    size_t m = bitmap_popcount(uni.data(), n);
    std::vector<float> acc(m + 1, 0.0f), vals(m + 1);
    for (int r = 0; r < P; ++r) {
      ASSERT_EQ(sparse_compact(uni.data(), n, xs[r].data(), ElemType::kF32, vals.data()), m);
      for (size_t k = 0; k < m; ++k)
        acc[k] += vals[k];
    }
    std::vector<float> y(n + 1, 7.0f);
    ASSERT_EQ(sparse_scatter(uni.data(), n, acc.data(), 0.5f, y.data(), ElemType::kF32), m);
    EXPECT_EQ(y[n], 7.0f);
    for (size_t i = 0; i < n; ++i) {
      float ref = 0.0f;
      for (int r = 0; r < P; ++r)
        ref += xs[r][i];
      if (std::isnan(ref)) {
        EXPECT_TRUE(std::isnan(y[i]));
      } else {
        EXPECT_EQ(y[i], ref * 0.5f) << i;
      }
    }
  }
}

TEST(Sparse, HalfTypesAndTailBits) {
  const size_t n = 70;
  std::vector<uint16_t> h(n, 0);
  h[3] = detail::float_to_half(1.5f);
  h[69] = detail::float_to_half(-2.0f);
  std::vector<uint64_t> bm(2);
  bitmap_build(h.data(), ElemType::kF16, n, bm.data());
  EXPECT_EQ(bitmap_popcount(bm.data(), n), 2u);
  bm[1] |= 1ull << 20;  // bit 84 >= n: ignored by every reader
  EXPECT_EQ(bitmap_popcount(bm.data(), n), 2u);
  float v[2];
  EXPECT_EQ(sparse_compact(bm.data(), n, h.data(), ElemType::kF16, v), 2u);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  std::vector<uint16_t> out(n, 0xffff);
  EXPECT_EQ(sparse_scatter(bm.data(), n, v, 2.0f, out.data(), ElemType::kBf16), 2u);
  EXPECT_EQ(detail::bf16_to_float(out[3]), 3.0f);
  EXPECT_EQ(detail::bf16_to_float(out[69]), -4.0f);
  EXPECT_EQ(out[0], 0u);
}

TEST(HalfConversions, RoundTripAndRounding) {
  // Every half value converts to float and back unchanged (NaN stays NaN).
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = detail::half_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(detail::half_to_float(detail::float_to_half(f))));
    } else {
      ASSERT_EQ(detail::float_to_half(f), h) << h;
    }
    float b = detail::bf16_to_float(uint16_t(h));
    if (!std::isnan(b)) {
      ASSERT_EQ(detail::float_to_bf16(b), h) << h;
    }
  }
  EXPECT_EQ(detail::float_to_half(65520.0f), 0x7c00u);  // overflow -> Inf
  EXPECT_EQ(detail::float_to_half(65504.0f), 0x7bffu);
  EXPECT_EQ(detail::float_to_half(1.0f + 1.0f / 2048), 0x3c00u);  // tie to even
  EXPECT_EQ(detail::float_to_half(5.9604645e-8f), 0x0001u);       // smallest subnormal
  EXPECT_EQ(detail::float_to_bf16(1.0f + 1.0f / 256), 0x3f80u);   // tie to even
}

}  // namespace
}  // namespace sketchccl::kernels
