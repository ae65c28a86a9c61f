// s2's decode (kernels/s2_peel.h, the one source of both builds): exact fixed-point residuals and
// a result that does not depend on the order in which a round's counters are visited, which on
// the GPU is thread timing (fp64 atomics there would let ranks decode one packet differently).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/s2_decode_host.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

using detail::S2Fix;
using namespace testing;  // NOLINT

std::vector<uint32_t> decoded_bits(const CodecParams& p, const Packet& pkt, size_t n,
                                   uint64_t order_seed, DecodeStats* st) {
  detail::S2HostDecode d;
  const uint8_t* b = static_cast<const uint8_t*>(pkt.data());
  detail::s2_peel_host(p, b, n, order_seed, &d, st);
  const uint64_t* nf =
      reinterpret_cast<const uint64_t*>(b + detail::s2_layout(p.s2_rows, p.s2_counters, n).nf_off);
  std::vector<uint32_t> out(n, 0);
  for (size_t k = 0; k < d.pos.size(); ++k)
    out[d.pos[k]] = detail::f2u(detail::s2_output(d.s, nf, k, 0.25f));
  return out;
}

// Values spanning 2^-60 .. 2^60, so fp64 residuals would round differently in another order.
std::vector<float> wide_sparse(size_t n, double density, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(n, 0.0f);
  for (auto& x : v) {
    if (u(g) >= density) continue;
    x = float(std::ldexp(u(g) + 0.5, int(u(g) * 120) - 60) * (u(g) < 0.5 ? -1 : 1));
  }
  return v;
}

TEST(S2Peel, SameBitsWhateverTheOrderOfARoundsCounters) {
  const size_t n = 200003;
  // Below, near and past the peeling threshold: full recovery, many rounds, a stalled core.
  for (double per_nonzero : {2.0, 1.3, 1.1}) {
    SCOPED_TRACE(per_nonzero);
    std::vector<std::vector<float>> xs;
    for (int k = 0; k < 4; ++k)
      xs.push_back(wide_sparse(n, 0.02, 40 + k));
    size_t support = 0;
    for (float v : seq_sum(xs))
      support += v != 0.0f;
    CodecParams p = params_for(CodecId::kS2, support);
    p.s2_counters = s2_counters_for_support(support, 3, per_nonzero);
    bool ok = false;
    Packet fin = run_chain(p, xs, n, &ok);
    ASSERT_TRUE(ok);
    DecodeStats st0;
    const std::vector<uint32_t> ref = decoded_bits(p, fin, n, 0, &st0);
    EXPECT_GT(st0.peeled, 0u);
    for (uint64_t seed : {1u, 2u, 3u}) {
      DecodeStats st;
      EXPECT_EQ(decoded_bits(p, fin, n, seed, &st), ref) << "order seed " << seed;
      EXPECT_EQ(st.peeled, st0.peeled);
      EXPECT_EQ(st.nonzeros, st0.nonzeros);
    }
    // The public decode is the same driver.
    std::vector<float> y(n);
    ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 0.25f, nullptr).ok());
    for (size_t i = 0; i < n; ++i) {
      if (ref[i] != 0) {
        ASSERT_EQ(detail::f2u(y[i]), ref[i]) << i;
      }
    }
  }
}

// One rank, a support the sketch resolves: every value comes back exactly (its counters' fp64
// sums of a few fp32 values are exact, and so are the fixed-point residuals).
TEST(S2Peel, RecoversASparseInputExactly) {
  const size_t n = 100000;
  std::vector<float> x = make_data(Dist::kSparse1, n, 5);
  size_t support = 0;
  for (float v : x)
    support += v != 0.0f;
  CodecParams p = params_for(CodecId::kS2, support);
  p.s2_counters = s2_counters_for_support(support, 3, 2.0);
  bool ok = false;
  Packet fin = run_chain(p, {x}, n, &ok);
  ASSERT_TRUE(ok);
  std::vector<float> y(n);
  DecodeStats st;
  ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, &st).ok());
  EXPECT_EQ(st.nonzeros, support);
  EXPECT_EQ(st.estimated, 0u);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(detail::f2u(y[i]), detail::f2u(x[i])) << i;
}

// The fixed point: exact from the largest counter down to 2^-47 of it, sums order-free and
// exact, negation and round trips through double.
TEST(S2Peel, FixedPointIsExactAcrossTheCountersRange) {
  const double big = std::ldexp(1.75, 90), small = std::ldexp(-1.25, 90 - 47);
  const int emax = std::max(detail::s2_exponent(big), detail::s2_exponent(small));
  const S2Fix fb = detail::s2_to_fix(big, emax), fs = detail::s2_to_fix(small, emax);
  EXPECT_EQ(detail::s2_from_fix(fb, emax), big);
  EXPECT_EQ(detail::s2_from_fix(fs, emax), small);
  EXPECT_EQ(detail::s2_from_fix(detail::s2_fix_neg(fb), emax), -big);
  const S2Fix sum = detail::s2_fix_add(fb, fs);
  EXPECT_EQ(detail::s2_from_fix(detail::s2_fix_add(sum, detail::s2_fix_neg(fb)), emax), small);
  EXPECT_EQ(detail::s2_from_fix(
                detail::s2_fix_add(detail::s2_fix_add(fs, fb), detail::s2_fix_neg(fs)), emax),
            big);
  // Zero, subnormals and non-finite counters (a corrupt packet counts them as 0).
  EXPECT_EQ(detail::s2_from_fix(detail::s2_to_fix(0.0, emax), emax), 0.0);
  EXPECT_EQ(detail::s2_exponent(INFINITY), -1);
  const S2Fix inf = detail::s2_to_fix(INFINITY, emax);
  EXPECT_EQ(inf.lo | inf.hi, 0u);
  const double tiny = std::ldexp(1.0, -1070);
  const int et = detail::s2_exponent(tiny);
  EXPECT_EQ(detail::s2_from_fix(detail::s2_to_fix(tiny, et), et), tiny);
}

// The engine's exact repair (coll/s2_repair.h) reduces what decode reports as unresolved: the
// report must be exactly the support positions left open by the peel, less the non-finite
// blocks (which decode as NaN whatever they hold).
TEST(S2Peel, UnresolvedPositionsAreExactlyTheOnesNotPeeled) {
  const size_t n = 100003;
  for (double per_nonzero : {2.0, 1.1, 0.7}) {
    SCOPED_TRACE(per_nonzero);
    std::vector<std::vector<float>> xs;
    for (int k = 0; k < 3; ++k)
      xs.push_back(wide_sparse(n, 0.03, 70 + k));
    xs[1][5 * 256 + 7] = NAN;  // block 5 decodes as NaN
    size_t support = 0;
    for (float v : seq_sum(xs))
      support += v != 0.0f;
    CodecParams p = params_for(CodecId::kS2, support);
    p.s2_counters = s2_counters_for_support(support, 3, per_nonzero);
    bool ok = false;
    Packet fin = run_chain(p, xs, n, &ok);
    ASSERT_TRUE(ok);
    // What the peel left open, from its own state.
    detail::S2HostDecode d;
    DecodeStats peel;
    const uint8_t* b = static_cast<const uint8_t*>(fin.data());
    detail::s2_peel_host(p, b, n, 0, &d, &peel);
    std::vector<uint64_t> want(detail::bitmap_words(n), 0);
    size_t open = 0, open_in_nan = 0;
    for (size_t k = 0; k < d.pos.size(); ++k) {
      if (d.state[k] != detail::kS2Open) continue;
      open++;
      if (d.pos[k] / detail::kBlock == 5) {
        open_in_nan++;
        continue;
      }
      want[d.pos[k] / 64] |= uint64_t(1) << (d.pos[k] % 64);
    }
    EXPECT_EQ(open, peel.estimated);
    // The public decode's report, into a bitmap holding garbage first.
    std::vector<uint64_t> got(detail::bitmap_words(n), ~uint64_t(0));
    DecodeStats st;
    st.unresolved = got.data();
    std::vector<float> y(n);
    ASSERT_TRUE(decode(p, fin.data(), fin.bytes, y.data(), ElemType::kF32, n, 1.0f, &st).ok());
    EXPECT_EQ(st.unresolved, got.data());  // the pointer survives the decode
    EXPECT_EQ(st.estimated, peel.estimated);
    EXPECT_EQ(got, want);
    size_t reported = 0;
    for (uint64_t w : got)
      reported += size_t(__builtin_popcountll(w));
    EXPECT_EQ(reported, open - open_in_nan);
    if (per_nonzero >= 2.0) {
      EXPECT_EQ(reported, 0u);
    } else {
      EXPECT_GT(reported, 0u);  // the thin budgets leave something to repair
    }
  }
}

}  // namespace
}  // namespace sketchccl::kernels
