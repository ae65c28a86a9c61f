// CPU path of every codec against the codec contract (docs/architecture.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_impl.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

using testing::all_codecs;
using testing::Dist;
using testing::make_data;
using testing::nmse;
using testing::Packet;
using testing::params_for;
using testing::run_chain;
using testing::seq_sum;

std::string name_of(const ::testing::TestParamInfo<CodecId>& info) {
  return codec_name(info.param);
}

bool is_q(CodecId c) {
  return detail::is_quant(c);
}
bool is_casq(CodecId c) {
  return detail::is_casq(c);
}
// The quantizer a rotated codec applies to its rotation (its error bounds are q*'s in NMSE).
CodecId unrotated(CodecId c) {
  switch (c) {
    case CodecId::kQ8r:
      return CodecId::kQ8;
    case CodecId::kQ4r:
      return CodecId::kQ4;
    case CodecId::kQ2r:
      return CodecId::kQ2;
    default:
      return c;
  }
}

// Per-element bound on |decoded - exact sum| after the packets `chain` (encode, steps...) of a
// linear codec, from the partial sums `partials` (exact, fp32) and the packets themselves.
double elem_bound(CodecId c, const std::vector<Packet>& chain,
                  const std::vector<std::vector<float>>& partials, size_t i) {
  double b = 0;
  for (size_t k = 0; k < chain.size(); ++k) {
    double mag = std::fabs(partials[k][i]) + (k ? std::fabs(partials[k - 1][i]) : 0.0);
    switch (c) {
      case CodecId::kNone:
        b += 1e-7 * mag;
        break;
      case CodecId::kBf16:
        b += (1.0 / 256) * (mag + b) + 1e-30;
        break;
      case CodecId::kFp16:
        b += (1.0 / 2048) * (mag + b) + 6e-8;
        break;
      default: {  // q*: stochastic rounding moves a value by less than one step of its block
        const uint8_t* rec = reinterpret_cast<const uint8_t*>(chain[k].data()) +
                             sizeof(detail::PacketHeader) +
                             (i / detail::kBlock) * detail::q_record_bytes(detail::codec_bits(c));
        float scale;
        std::memcpy(&scale, rec + 4, 4);
        if (!detail::codec_rotated(c)) {
          b += double(scale) * (1 + 1e-5) + 1e-6 * mag;
          break;
        }
        // Rotated: 256 rotated errors under a step each, and back through H / 16 (entries of
        // +-1/16): at most 16 steps per element, plus the transforms' rounding.
        double block_mag = 0;
        const size_t b0 = i / detail::kBlock * detail::kBlock;
        for (size_t j = b0; j < std::min(b0 + detail::kBlock, partials[k].size()); ++j)
          block_mag = std::max(block_mag, std::fabs(double(partials[k][j])) +
                                              (k ? std::fabs(double(partials[k - 1][j])) : 0.0));
        b += 16.0 * double(scale) * (1 + 1e-5) + 1e-5 * block_mag;
      }
    }
  }
  return b;
}

class CodecTest : public ::testing::TestWithParam<CodecId> {};

TEST(CodecNames, RoundTrip) {
  for (CodecId c : all_codecs()) {
    CodecId back;
    ASSERT_TRUE(codec_from_name(codec_name(c), &back));
    EXPECT_EQ(back, c);
  }
  CodecId c;
  EXPECT_TRUE(codec_from_name("sparse", &c));
  EXPECT_EQ(c, CodecId::kSparse);
  EXPECT_FALSE(codec_from_name("auto", &c));
  EXPECT_FALSE(codec_from_name("q3", &c));
  EXPECT_FALSE(codec_from_name(nullptr, &c));
  EXPECT_EQ(elem_size(ElemType::kF32), 4u);
  EXPECT_EQ(elem_size(ElemType::kBf16), 2u);
}

TEST(CodecSizes, WireRatios) {
  const size_t n = 1 << 18;
  auto ratio = [&](CodecId c) {
    return double(packet_bytes(params_for(c, n / 100), n)) / (4.0 * n);
  };
  EXPECT_NEAR(ratio(CodecId::kNone), 1.0, 1e-3);
  EXPECT_NEAR(ratio(CodecId::kBf16), 0.5, 1e-3);
  EXPECT_NEAR(ratio(CodecId::kQ8), (1 + 8.0 / 256) / 4, 1e-3);
  EXPECT_NEAR(ratio(CodecId::kQ4), (0.5 + 8.0 / 256) / 4, 1e-3);
  EXPECT_NEAR(ratio(CodecId::kQ2), (0.25 + 8.0 / 256) / 4, 1e-3);
  EXPECT_LT(ratio(CodecId::kCasq2), 0.08);
  EXPECT_LT(ratio(CodecId::kCasq4), 0.14);
  CodecParams sp = params_for(CodecId::kSparse, 1);
  EXPECT_EQ(packet_bytes(sp, n), 0u);  // two-phase: no packet
  Packet pk(64);
  std::vector<float> x(4, 1.0f);
  EXPECT_FALSE(encode(sp, x.data(), ElemType::kF32, 4, pk.data(), 64).ok());
}

TEST_P(CodecTest, RoundTripAndSum) {
  const CodecId c = GetParam();
  for (size_t n : {size_t(1), size_t(255), size_t(1000), size_t(4096)}) {
    SCOPED_TRACE(n);
    std::vector<std::vector<float>> xs = {make_data(Dist::kGauss, n, 1),
                                          make_data(Dist::kGauss, n, 2)};
    CodecParams p = params_for(c, 2 * n);
    bool ok;
    std::vector<Packet> chain;
    Packet one = run_chain(p, {xs[0]}, n, &ok, &chain);
    ASSERT_TRUE(ok);
    std::vector<float> y(n);
    DecodeStats st;
    ASSERT_TRUE(decode(p, one.data(), one.bytes, y.data(), ElemType::kF32, n, 1.0f, &st).ok());
    chain.clear();
    Packet two = run_chain(p, xs, n, &ok, &chain);
    ASSERT_TRUE(ok);
    std::vector<float> y2(n);
    ASSERT_TRUE(decode(p, two.data(), two.bytes, y2.data(), ElemType::kF32, n, 1.0f, &st).ok());
    std::vector<float> sum = seq_sum(xs);
    if (c == CodecId::kNone) {
      EXPECT_EQ(y, xs[0]);
      EXPECT_EQ(y2, sum);  // exact: same fp32 addition order
    } else if (c == CodecId::kS2) {
      EXPECT_EQ(st.estimated, 0u);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_NEAR(y[i], xs[0][i], 1e-5);
        EXPECT_NEAR(y2[i], sum[i], 1e-5);
      }
    } else if (is_casq(c)) {
      // Stochastic rounding (unbiased) costs variance: q2's 0.6 at 2 bits (docs/codecs.md).
      double bound = c == CodecId::kCasq2 ? 0.6 : (c == CodecId::kCasq3 ? 0.12 : 0.03);
      if (n >= 1000) {
        EXPECT_LT(nmse(xs[0], y), bound);
        EXPECT_LT(nmse(sum, y2), 2.5 * bound);
      }
      for (float v : y2)
        EXPECT_TRUE(std::isfinite(v));
    } else {
      std::vector<std::vector<float>> partials = {xs[0], sum};
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(double(y2[i]) - sum[i]), elem_bound(c, chain, partials, i)) << i;
      }
    }
  }
}

// The engine's pattern: encode on one rank, P-1 steps, decode; bound on the sum of P slices.
TEST_P(CodecTest, RingChainOfEight) {
  const CodecId c = GetParam();
  const size_t n = 3000;
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < 8; ++k) {
    xs.push_back(make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kGauss, n, 10 + k));
  }
  std::vector<std::vector<float>> partials;
  for (size_t k = 1; k <= xs.size(); ++k) {
    partials.push_back(seq_sum(std::vector<std::vector<float>>(xs.begin(), xs.begin() + k)));
  }
  size_t support = 0;
  for (float v : partials.back())
    support += v != 0.0f;
  CodecParams p = params_for(c, support);
  bool ok;
  std::vector<Packet> chain;
  Packet fin = run_chain(p, xs, n, &ok, &chain);
  ASSERT_TRUE(ok);
  std::vector<float> y(n);
  DecodeStats st;
  ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 0.125f, &st).ok());
  for (float& v : y)
    v *= 8.0f;  // undo avg (exact: power of two)
  const std::vector<float>& sum = partials.back();
  if (c == CodecId::kNone) {
    EXPECT_EQ(y, sum);
  } else if (c == CodecId::kS2) {
    EXPECT_EQ(st.nonzeros, support);
    EXPECT_GE(double(st.peeled), 0.99 * double(support));
    double tol = 0;
    for (float v : sum)
      tol = std::max(tol, 1e-5 * std::fabs(v));
    size_t exact = 0;
    for (size_t i = 0; i < n; ++i)
      exact += std::fabs(y[i] - sum[i]) <= tol + 1e-6;
    EXPECT_GE(double(exact), n - 0.01 * double(support));
  } else if (is_casq(c)) {
    // Eight stochastic re-quantizations add their variance (q2's ring: 4 to 5, docs/codecs.md).
    double bound = c == CodecId::kCasq2 ? 8.0 : (c == CodecId::kCasq3 ? 1.0 : 0.15);
    EXPECT_LT(nmse(sum, y), bound);
  } else {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(double(y[i]) - sum[i]), elem_bound(c, chain, partials, i)) << i;
    }
  }
}

TEST_P(CodecTest, Deterministic) {
  const CodecId c = GetParam();
  const size_t n = 2000;
  std::vector<std::vector<float>> xs = {make_data(Dist::kLaplace, n, 5),
                                        make_data(Dist::kLaplace, n, 6),
                                        make_data(Dist::kLaplace, n, 7)};
  CodecParams p = params_for(c, 3 * n);
  bool ok1, ok2;
  std::vector<Packet> a, b;
  run_chain(p, xs, n, &ok1, &a);
  run_chain(p, xs, n, &ok2, &b);
  ASSERT_TRUE(ok1 && ok2);
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_EQ(a[k].raw(), b[k].raw()) << "packet " << k;
  // Another seed changes the randomness of stochastic codecs but not the layout.
  CodecParams q = p;
  q.seed = 99;
  std::vector<Packet> d;
  run_chain(q, xs, n, &ok1, &d);
  ASSERT_TRUE(ok1);
  EXPECT_EQ(d.back().bytes, a.back().bytes);
  if (is_q(c) || is_casq(c) || c == CodecId::kS2) {
    EXPECT_NE(d.back().raw(), a.back().raw());
  }
  // Decoding is deterministic too.
  std::vector<float> y1(n), y2(n);
  ASSERT_TRUE(
      decode(p, a.back().data(), a.back().bytes, y1.data(), ElemType::kF32, n, 1, nullptr).ok());
  ASSERT_TRUE(
      decode(p, a.back().data(), a.back().bytes, y2.data(), ElemType::kF32, n, 1, nullptr).ok());
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), n * 4));
}

TEST_P(CodecTest, InPlaceStep) {
  const CodecId c = GetParam();
  const size_t n = 700;
  std::vector<float> a = make_data(Dist::kGauss, n, 1), b = make_data(Dist::kGauss, n, 2);
  CodecParams p = params_for(c, 2 * n);
  size_t bytes = packet_bytes(p, n);
  Packet x(bytes), y(bytes), z(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, x.data(), bytes).ok());
  y = x;
  p.step = 1;
  ASSERT_TRUE(step(p, x.data(), bytes, b.data(), ElemType::kF32, n, z.data(), bytes).ok());
  ASSERT_TRUE(step(p, y.data(), bytes, b.data(), ElemType::kF32, n, y.data(), bytes).ok());
  EXPECT_EQ(y.raw(), z.raw());
}

TEST_P(CodecTest, EmptyAndTinyAndOddSizes) {
  const CodecId c = GetParam();
  for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(7), size_t(255), size_t(256),
                   size_t(257), size_t(513)}) {
    SCOPED_TRACE(n);
    std::vector<float> a = make_data(Dist::kGauss, n, 3);
    CodecParams p = params_for(c, n);
    size_t bytes = packet_bytes(p, n);
    ASSERT_GE(bytes, sizeof(detail::PacketHeader));
    ASSERT_EQ(bytes % 8, 0u);
    Packet pk(bytes), pk2(bytes);
    ASSERT_TRUE(encode(p, n ? a.data() : nullptr, ElemType::kF32, n, pk.data(), bytes).ok());
    p.step = 1;
    ASSERT_TRUE(
        step(p, pk.data(), bytes, n ? a.data() : nullptr, ElemType::kF32, n, pk2.data(), bytes)
            .ok());
    std::vector<float> y(n + 1, 42.0f);
    ASSERT_TRUE(
        decode(p, pk2.data(), bytes, n ? y.data() : nullptr, ElemType::kF32, n, 0.5f, nullptr)
            .ok());
    EXPECT_EQ(y[n], 42.0f);  // nothing written past n
    if (c == CodecId::kNone) {
      for (size_t i = 0; i < n; ++i)
        EXPECT_EQ(y[i], a[i]);  // (a + a) / 2
    }
    for (size_t i = 0; i < n; ++i)
      EXPECT_TRUE(std::isfinite(y[i]));
  }
}

TEST_P(CodecTest, VeryLarge) {
  const CodecId c = GetParam();
  const size_t n = (size_t(1) << 21) + 7;
  const Dist d = c == CodecId::kS2 ? Dist::kSparse1 : Dist::kGauss;
  std::vector<std::vector<float>> xs = {make_data(d, n, 1), make_data(d, n, 2)};
  size_t support = 0;
  std::vector<float> sum = seq_sum(xs);
  for (float v : sum)
    support += v != 0.0f;
  CodecParams p = params_for(c, support);
  bool ok;
  Packet fin = run_chain(p, xs, n, &ok);
  ASSERT_TRUE(ok);
  std::vector<float> y(n);
  DecodeStats st;
  ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, &st).ok());
  double e = nmse(sum, y);
  const CodecId u = unrotated(c);
  double bound = u == CodecId::kNone                         ? 0
                 : u == CodecId::kS2                         ? 1e-12
                 : u == CodecId::kQ2 || u == CodecId::kCasq2 ? 1.5
                                                             : 0.3;
  EXPECT_LE(e, bound);
  if (c == CodecId::kS2) {
    EXPECT_EQ(st.estimated, 0u);
  }
}

// fp16 and bf16 buffers are read and written in their own type.
TEST_P(CodecTest, HalfTypes) {
  const CodecId c = GetParam();
  const size_t n = 1500;
  for (ElemType t : {ElemType::kF16, ElemType::kBf16}) {
    SCOPED_TRACE(int(t));
    std::vector<float> a = make_data(Dist::kGauss, n, 8), b = make_data(Dist::kGauss, n, 9);
    std::vector<uint16_t> ha(n), hb(n), hy(n);
    std::vector<float> ref(n), got(n);
    for (size_t i = 0; i < n; ++i) {
      ha[i] = t == ElemType::kF16 ? detail::float_to_half(a[i]) : detail::float_to_bf16(a[i]);
      hb[i] = t == ElemType::kF16 ? detail::float_to_half(b[i]) : detail::float_to_bf16(b[i]);
      auto back = [&](uint16_t h) {
        return t == ElemType::kF16 ? detail::half_to_float(h) : detail::bf16_to_float(h);
      };
      ref[i] = back(ha[i]) + back(hb[i]);
    }
    CodecParams p = params_for(c, 2 * n);
    size_t bytes = packet_bytes(p, n);
    Packet x(bytes), z(bytes);
    ASSERT_TRUE(encode(p, ha.data(), t, n, x.data(), bytes).ok());
    p.step = 1;
    ASSERT_TRUE(step(p, x.data(), bytes, hb.data(), t, n, z.data(), bytes).ok());
    ASSERT_TRUE(decode(p, z.data(), bytes, hy.data(), t, n, 1.0f, nullptr).ok());
    for (size_t i = 0; i < n; ++i) {
      got[i] = t == ElemType::kF16 ? detail::half_to_float(hy[i]) : detail::bf16_to_float(hy[i]);
    }
    double out_round = t == ElemType::kF16 ? 1e-6 : 3e-5;  // rounding of the output itself
    const CodecId u = unrotated(c);
    double bound = u == CodecId::kNone || u == CodecId::kS2    ? out_round
                   : u == CodecId::kBf16                       ? 3e-5
                   : u == CodecId::kFp16                       ? 1e-6
                   : u == CodecId::kQ8                         ? 1e-3
                   : u == CodecId::kQ4                         ? 0.05
                   : u == CodecId::kQ2 || u == CodecId::kCasq2 ? 1.5
                                                               : 0.2;
    EXPECT_LE(nmse(ref, got), bound + out_round);
  }
}

// Loss scaling detects overflow through non-finite results: they must never be hidden.
TEST_P(CodecTest, NonFiniteIsNeverHidden) {
  const CodecId c = GetParam();
  const size_t n = 1000;
  const float specials[] = {NAN, INFINITY, -INFINITY};
  for (float sp : specials) {
    for (int where = 0; where < 2; ++where) {  // in the encoded slice, or in a stepped slice
      std::vector<float> a = make_data(Dist::kGauss, n, 1), b = make_data(Dist::kGauss, n, 2);
      (where ? b : a)[600] = sp;
      CodecParams p = params_for(c, 2 * n);
      bool ok;
      Packet fin = run_chain(p, {a, b}, n, &ok);
      ASSERT_TRUE(ok);
      std::vector<float> y(n);
      ASSERT_TRUE(
          decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
      EXPECT_FALSE(std::isfinite(y[600])) << "special " << sp << " where " << where;
      // Blocks without specials stay finite (except casts: the element itself only).
      EXPECT_TRUE(std::isfinite(y[10]));
      EXPECT_TRUE(std::isfinite(y[999]));
    }
  }
}

// A NaN result is always the same bits (qnan), whatever NaN or Inf - Inf produced it: x86
// keeps an input NaN's sign and payload where the GPU does not, and both builds must agree.
TEST_P(CodecTest, NanResultsAreCanonical) {
  const CodecId c = GetParam();
  const size_t n = 300;
  std::vector<float> a = make_data(Dist::kGauss, n, 1), b = make_data(Dist::kGauss, n, 2);
  a[5] = detail::u2f(0xffc01234u);  // a negative NaN with a payload
  a[7] = INFINITY;
  b[7] = -INFINITY;
  CodecParams p = params_for(c, 2 * n);
  bool ok;
  Packet fin = run_chain(p, {a, b}, n, &ok);
  ASSERT_TRUE(ok);
  std::vector<float> y(n);
  ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 0.5f, nullptr).ok());
  for (size_t i : {size_t(5), size_t(7)})
    EXPECT_EQ(detail::f2u(y[i]), 0x7fc00000u) << "element " << i;
}

TEST_P(CodecTest, MalformedPacketsAreRejected) {
  const CodecId c = GetParam();
  const size_t n = 600;
  std::vector<float> a = make_data(Dist::kGauss, n, 1);
  CodecParams p = params_for(c, n);
  const size_t bytes = packet_bytes(p, n);
  Packet good(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, good.data(), bytes).ok());
  std::vector<float> y(n);
  Packet out(bytes);
  auto rejected = [&](const CodecParams& q, const Packet& pk, size_t len, size_t nn) {
    bool d = !decode(q, pk.data(), len, y.data(), ElemType::kF32, nn, 1.0f, nullptr).ok();
    bool s = !step(q, pk.data(), len, a.data(), ElemType::kF32, nn, out.data(), bytes).ok();
    return d && s;
  };
  EXPECT_FALSE(rejected(p, good, bytes, n));
  for (size_t len : {size_t(0), size_t(7), sizeof(detail::PacketHeader), bytes - 1}) {
    EXPECT_TRUE(rejected(p, good, len, n)) << "truncated to " << len;
  }
  auto corrupt = [&](size_t off, uint8_t v) {
    Packet bad = good;
    reinterpret_cast<uint8_t*>(bad.data())[off] = v;
    return bad;
  };
  EXPECT_TRUE(rejected(p, corrupt(0, 0x00), bytes, n)) << "magic";
  EXPECT_TRUE(rejected(p, corrupt(4, detail::kVersion + 1), bytes, n)) << "version";
  EXPECT_TRUE(rejected(p, corrupt(4, 1), bytes, n)) << "version 1 (CASQ's former layout)";
  EXPECT_TRUE(rejected(p, corrupt(5, uint8_t(c) == 0 ? 1 : 0), bytes, n)) << "codec";
  EXPECT_TRUE(rejected(p, corrupt(5, 200), bytes, n)) << "unknown codec";
  EXPECT_TRUE(rejected(p, corrupt(6, 7), bytes, n)) << "bits";
  EXPECT_TRUE(rejected(p, corrupt(8, 0x77), bytes, n)) << "count";
  EXPECT_TRUE(rejected(p, corrupt(16, 0x55), bytes, n)) << "p0";
  EXPECT_TRUE(rejected(p, good, bytes, n - 1)) << "count vs expected";
  if (!is_casq(c)) {  // s2's salt hashes positions; the others carry 0 (CASQ's is free)
    EXPECT_TRUE(rejected(p, corrupt(24, 0x55), bytes, n)) << "salt";
  }
  if (c == CodecId::kS2) {
    EXPECT_TRUE(rejected(p, corrupt(7, 9), bytes, n)) << "rows";
    CodecParams q = p;
    q.s2_counters += 1;  // budget differs from the packet's
    EXPECT_TRUE(rejected(q, good, bytes + 64, n)) << "budget";
    q = p;
    q.call += 1;
    EXPECT_TRUE(rejected(q, good, bytes, n)) << "call";
  }
  if (is_casq(c)) {
    EXPECT_TRUE(rejected(p, corrupt(20, 0x55), bytes, n)) << "levels (p1)";
    EXPECT_TRUE(rejected(p, corrupt(sizeof(detail::PacketHeader), 0xff), bytes, n)) << "sizes";
    Packet bad = good;  // a zero-sized table
    std::memset(reinterpret_cast<uint8_t*>(bad.data()) + sizeof(detail::PacketHeader), 0, 4);
    EXPECT_TRUE(rejected(p, bad, bytes, n)) << "empty table";
  }
  // Misaligned packets are refused rather than read.
  Packet big(bytes + 8);
  std::memcpy(reinterpret_cast<uint8_t*>(big.data()) + 1, good.data(), bytes);
  const uint8_t* mis = reinterpret_cast<const uint8_t*>(big.data()) + 1;
  EXPECT_FALSE(decode(p, mis, bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  // Invalid parameters and capacities.
  EXPECT_FALSE(encode(p, a.data(), ElemType::kF32, n, out.data(), bytes - 1).ok());
  EXPECT_FALSE(encode(p, a.data(), ElemType(7), n, out.data(), bytes).ok());
  EXPECT_FALSE(decode(p, good.data(), bytes, nullptr, ElemType::kF32, n, 1.0f, nullptr).ok());
  CodecParams inval = p;
  inval.codec = CodecId(77);
  EXPECT_EQ(packet_bytes(inval, n), 0u);
  EXPECT_FALSE(encode(inval, a.data(), ElemType::kF32, n, out.data(), bytes).ok());
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecTest, ::testing::ValuesIn(all_codecs()), name_of);

TEST(CodecParamsCheck, BadS2Parameters) {
  std::vector<float> x(16, 1.0f);
  Packet pk(1 << 16);
  CodecParams p = params_for(CodecId::kS2, 16);
  p.s2_rows = 0;
  EXPECT_FALSE(encode(p, x.data(), ElemType::kF32, 16, pk.data(), 1 << 16).ok());
  p.s2_rows = 9;
  EXPECT_FALSE(encode(p, x.data(), ElemType::kF32, 16, pk.data(), 1 << 16).ok());
  p.s2_rows = 3;
  p.s2_counters = 0;
  EXPECT_FALSE(encode(p, x.data(), ElemType::kF32, 16, pk.data(), 1 << 16).ok());
}

TEST(S2Budget, Helpers) {
  EXPECT_EQ(s2_counters_for_support(0, 3, 1.3), kS2MinCounters);
  EXPECT_EQ(s2_counters_for_support(3000, 3, 1.3), 1300u);
  EXPECT_EQ(s2_counters_for_budget(1 << 20, 3, 0.25), 87382u);
  EXPECT_EQ(s2_counters_for_budget(1 << 20, 0, 1e9), 1u << 30);
}

}  // namespace
}  // namespace sketchccl::kernels
