// q8r/q4r/q2r's randomized Hadamard transform (kernels/rotation.h) and what the codecs owe to
// it: the inverse undoes the rotation, rotated contributions add like the values, the signs do
// not depend on the ring step, an outlier stops costing its block's other values their bits,
// and non-finite values spread over their block only, as q* handles them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_impl.h"
#include "kernels/rotation.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

using detail::kBlock;
using testing::Dist;
using testing::make_data;
using testing::nmse;
using testing::Packet;
using testing::params_for;
using testing::run_chain;
using testing::seq_sum;

std::vector<float> rotate(const std::vector<float>& x, uint64_t bkey) {
  float m[kBlock];
  detail::rot_mults(bkey, m);
  std::vector<float> y(kBlock);
  detail::rot_forward(x.data(), m, y.data());
  return y;
}

TEST(Rotation, InverseRestoresTheBlockAndKeepsItsEnergy) {
  for (uint64_t bkey : {1ull, 77ull, 0xfeedfacecafebeefull}) {
    const std::vector<float> x = make_data(Dist::kLaplace, kBlock, bkey);
    std::vector<float> y = rotate(x, bkey);
    double ex = 0, ey = 0;
    for (uint32_t j = 0; j < kBlock; ++j) {
      ex += double(x[j]) * x[j];
      ey += double(y[j]) * y[j];
    }
    EXPECT_NEAR(ey / ex, 1.0, 1e-5);  // orthonormal
    float m[kBlock];
    detail::rot_mults(bkey, m);
    detail::rot_inverse(y.data(), m);
    for (uint32_t j = 0; j < kBlock; ++j)
      EXPECT_NEAR(y[j], x[j], 1e-5 * (1 + std::fabs(x[j]))) << j;
  }
}

TEST(Rotation, SignsAreRandomPerBlockAndCall) {
  float a[kBlock], b[kBlock];
  const uint64_t k1 = detail::rot_key(1, 3, 2), k2 = detail::rot_key(1, 4, 2);
  detail::rot_mults(detail::rot_block_key(k1, 0), a);
  detail::rot_mults(detail::rot_block_key(k1, 1), b);
  int negative = 0, differ = 0;
  for (uint32_t j = 0; j < kBlock; ++j) {
    negative += a[j] < 0;
    differ += a[j] != b[j];
    EXPECT_EQ(std::fabs(a[j]), detail::kRotScale);
  }
  EXPECT_GT(negative, 96);  // about half of 256
  EXPECT_LT(negative, 160);
  EXPECT_GT(differ, 96);
  detail::rot_mults(detail::rot_block_key(k2, 0), b);
  differ = 0;
  for (uint32_t j = 0; j < kBlock; ++j)
    differ += a[j] != b[j];
  EXPECT_GT(differ, 96);  // another call, other signs
}

TEST(Rotation, CommutesWithTheSum) {
  const uint64_t bkey = 5;
  const std::vector<float> a = make_data(Dist::kGauss, kBlock, 1);
  const std::vector<float> b = make_data(Dist::kLaplace, kBlock, 2);
  std::vector<float> s(kBlock);
  for (uint32_t j = 0; j < kBlock; ++j)
    s[j] = a[j] + b[j];
  const std::vector<float> ra = rotate(a, bkey), rb = rotate(b, bkey), rs = rotate(s, bkey);
  for (uint32_t j = 0; j < kBlock; ++j)
    EXPECT_NEAR(ra[j] + rb[j], rs[j], 1e-5) << j;
}

// The ring's pattern: a packet stepped by every rank decodes to the sum (the steps add in the
// rotated domain, whatever step made the packet), with no more error than q*'s on Laplace data.
TEST(RotatedCodecs, RingSumsInTheRotatedDomain) {
  const size_t n = 5000;  // a partial last block too
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < 6; ++k)
    xs.push_back(make_data(Dist::kLaplace, n, 40 + k));
  const std::vector<float> sum = seq_sum(xs);
  auto ring_error = [&](CodecId c) {
    bool ok = false;
    CodecParams p = params_for(c, n);
    Packet fin = run_chain(p, xs, n, &ok);
    EXPECT_TRUE(ok);
    std::vector<float> y(n);
    EXPECT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
    return nmse(sum, y);
  };
  const std::pair<CodecId, CodecId> pairs[] = {
      {CodecId::kQ8r, CodecId::kQ8}, {CodecId::kQ4r, CodecId::kQ4}, {CodecId::kQ2r, CodecId::kQ2}};
  for (const auto& [rotated, plain] : pairs) {
    SCOPED_TRACE(codec_name(rotated));
    const double er = ring_error(rotated), ep = ring_error(plain);
    EXPECT_GT(er, 0.0);
    EXPECT_LT(er, ep);
  }
}

// One outlier per block sets q4's range; the rotation spreads it, so q4r's error on the rest
// is several times lower (docs/codecs.md has the measured ratios).
TEST(RotatedCodecs, OutliersCostLessThanUnrotated) {
  const size_t n = 64 * kBlock;
  std::vector<float> x = make_data(Dist::kLaplace, n, 9);
  for (size_t i = 17; i < n; i += kBlock)
    x[i] = 300.0f;
  auto error = [&](CodecId c) {
    CodecParams p = params_for(c, n);
    bool ok = false;
    Packet pk = run_chain(p, {x}, n, &ok);
    EXPECT_TRUE(ok);
    std::vector<float> y(n);
    EXPECT_TRUE(decode(p, pk.data(), pk.bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
    return nmse(x, y);
  };
  EXPECT_LT(error(CodecId::kQ4r), 0.3 * error(CodecId::kQ4));
  EXPECT_LT(error(CodecId::kQ2r), 0.5 * error(CodecId::kQ2));
}

// A NaN or Inf spreads over its block in the rotated domain: the whole block decodes as the
// canonical NaN (q*'s non-finite block), the other blocks keep their values.
TEST(RotatedCodecs, NonFiniteBlocksDecodeAsNan) {
  const size_t n = 3 * kBlock + 10;
  for (float sp : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> a = make_data(Dist::kGauss, n, 1), b = make_data(Dist::kGauss, n, 2);
    b[kBlock + 3] = sp;
    CodecParams p = params_for(CodecId::kQ4r, n);
    bool ok = false;
    Packet fin = run_chain(p, {a, b}, n, &ok);
    ASSERT_TRUE(ok);
    std::vector<float> y(n);
    ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
    for (size_t i = 0; i < n; ++i) {
      if (i / kBlock == 1) {
        EXPECT_EQ(detail::f2u(y[i]), 0x7fc00000u) << i;
      } else {
        EXPECT_TRUE(std::isfinite(y[i])) << i;
      }
    }
  }
}

// Every rank decodes the same packet with the call's parameters; the signs do not depend on the
// step that produced it, so a packet decodes alike under any step's parameters.
TEST(RotatedCodecs, DecodeDoesNotDependOnTheStep) {
  const size_t n = 1000;
  const std::vector<float> a = make_data(Dist::kGauss, n, 3);
  CodecParams p = params_for(CodecId::kQ4r, n);
  const size_t bytes = packet_bytes(p, n);
  Packet pk(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, pk.data(), bytes).ok());
  std::vector<float> y0(n), y5(n);
  ASSERT_TRUE(decode(p, pk.data(), bytes, y0.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  p.step = 5;
  ASSERT_TRUE(decode(p, pk.data(), bytes, y5.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  EXPECT_EQ(0, std::memcmp(y0.data(), y5.data(), 4 * n));
}

}  // namespace
}  // namespace sketchccl::kernels
