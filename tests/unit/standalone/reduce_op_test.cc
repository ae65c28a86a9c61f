// The exact collectives' elementwise ops (standalone/reduce_op.h): fp8 conversions against their
// definition, integer wrap-around and truncating avg, fp32 accumulation of the narrow floats.
#include "src/standalone/reduce_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace sketchccl::standalone {
namespace {

TEST(ReduceOp, Fp8EveryCodeRoundTrips) {
  for (DType t : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_to_float(t, static_cast<uint8_t>(c));
      if (std::isnan(v) || std::isinf(v)) continue;
      if (c == 0x80) continue;  // -0 keeps its sign: checked below
      EXPECT_EQ(float_to_fp8(t, v), c) << "type " << static_cast<int>(t) << " code " << c;
    }
    EXPECT_EQ(float_to_fp8(t, -0.0f), 0x80);
  }
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, 0x7e), 448.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E5M2, 0x7b), 57344.0f);
  EXPECT_TRUE(std::isnan(fp8_to_float(DType::kF8E4M3, 0x7f)));
  EXPECT_TRUE(std::isinf(fp8_to_float(DType::kF8E5M2, 0x7c)));
}

TEST(ReduceOp, Fp8RoundsToNearestEvenAndSaturates) {
  // e4m3 between 8 and 16 steps by 1: 8.5 is a tie between 8 (even code) and 9.
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, float_to_fp8(DType::kF8E4M3, 8.5f)), 8.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, float_to_fp8(DType::kF8E4M3, 9.5f)), 10.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, float_to_fp8(DType::kF8E4M3, 9.4f)), 9.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, float_to_fp8(DType::kF8E4M3, 1e6f)), 448.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E4M3, float_to_fp8(DType::kF8E4M3, -INFINITY)), -448.0f);
  EXPECT_EQ(fp8_to_float(DType::kF8E5M2, float_to_fp8(DType::kF8E5M2, 1e9f)), 57344.0f);
  EXPECT_TRUE(std::isnan(fp8_to_float(DType::kF8E5M2, float_to_fp8(DType::kF8E5M2, NAN))));
}

// Three ranks' contributions in ring order, as collectives.cc applies them.
template <typename T>
std::vector<T> reduce3(DType t, const RedOp& op, std::vector<T> a, const std::vector<T>& b,
                       const std::vector<T>& c, int nranks = 3) {
  std::vector<uint8_t> acc(a.size() * acc_size(t));
  acc_load(t, op, a.data(), a.size(), acc.data());
  acc_combine(t, op, acc.data(), b.data(), b.size());
  acc_combine(t, op, acc.data(), c.data(), c.size());
  acc_store(t, op, nranks, acc.data(), a.size(), a.data());
  return a;
}

TEST(ReduceOp, IntegersWrapAndAvgTruncatesTowardZero) {
  RedOp sum;
  EXPECT_EQ(reduce3<int8_t>(DType::kI8, sum, {100}, {100}, {100}), std::vector<int8_t>{44});
  EXPECT_EQ(reduce3<uint8_t>(DType::kU8, sum, {200}, {100}, {0}), std::vector<uint8_t>{44});
  RedOp prod{RedKind::kProd};
  EXPECT_EQ(reduce3<int32_t>(DType::kI32, prod, {-65536}, {65536}, {2}), std::vector<int32_t>{0});
  RedOp avg{RedKind::kAvg};
  EXPECT_EQ(reduce3<int32_t>(DType::kI32, avg, {-7, 7}, {0, 0}, {0, 1}),
            (std::vector<int32_t>{-2, 2}));
  EXPECT_EQ(reduce3<uint64_t>(DType::kU64, avg, {5}, {0}, {0}), std::vector<uint64_t>{1});
  RedOp mx{RedKind::kMax}, mn{RedKind::kMin};
  EXPECT_EQ(reduce3<int64_t>(DType::kI64, mx, {-5, 3}, {-9, 4}, {-7, 1}),
            (std::vector<int64_t>{-5, 4}));
  EXPECT_EQ(reduce3<uint32_t>(DType::kU32, mn, {5, 3}, {9, 4}, {7, 1}),
            (std::vector<uint32_t>{5, 1}));
}

TEST(ReduceOp, PreMulSumScalesEachContribution) {
  RedOp pm{RedKind::kPreMulSum};
  pm.int_scalar = static_cast<uint64_t>(int64_t{-3});
  EXPECT_EQ(reduce3<int32_t>(DType::kI32, pm, {1}, {2}, {3}), std::vector<int32_t>{-18});
  pm.float_scalar = 0.5;
  EXPECT_EQ(reduce3<double>(DType::kF64, pm, {1}, {2}, {3}), std::vector<double>{3});
}

TEST(ReduceOp, NarrowFloatsAccumulateInFp32AndRoundOnce) {
  // bf16 holds 8 significant bits: 256 + 1 + 1 rounds back to 256 step by step, but is 258 once.
  const uint16_t b256 = 0x4380, b1 = 0x3f80;
  RedOp sum;
  std::vector<uint16_t> out = reduce3<uint16_t>(DType::kBf16, sum, {b256}, {b1}, {b1});
  EXPECT_EQ(out[0], 0x4381);  // 258
  // fp8 e5m2 sums of small integers stay exact; avg of 3 rounds once.
  const uint8_t two = float_to_fp8(DType::kF8E5M2, 2.0f);
  RedOp avg{RedKind::kAvg};
  std::vector<uint8_t> a = reduce3<uint8_t>(DType::kF8E5M2, avg, {two}, {two}, {two});
  EXPECT_EQ(fp8_to_float(DType::kF8E5M2, a[0]), 2.0f);
}

TEST(ReduceOp, FloatMaxIgnoresNan) {
  RedOp mx{RedKind::kMax};
  std::vector<float> r = reduce3<float>(DType::kF32, mx, {NAN}, {1.0f}, {-2.0f});
  EXPECT_EQ(r[0], 1.0f);
}

}  // namespace
}  // namespace sketchccl::standalone
