// CASQ's fit and bucket sums (kernels/casq_fit.h, codec_impl.h): the same bits whatever order the
// lanes run in, as on the GPU where they are threads (review finding 7), and bucket means that
// differ from exact fp64 means only by rounding (the documented change of the fixed point).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "codec_test_util.h"
#include "kernels/casq_fit.h"

namespace sketchccl::kernels {
namespace {

using namespace testing;  // NOLINT

// Runs each step's lanes in a shuffled order: a thread block's lanes may run in any order.
struct ShuffledExec {
  detail::CasqPartials* partials;
  std::mt19937_64 rng{7};
  detail::CasqPartials* part() { return partials; }
  template <typename F>
  void lanes(F&& f) {
    std::vector<uint32_t> order(detail::kCasqLanes);
    for (uint32_t l = 0; l < detail::kCasqLanes; ++l)
      order[l] = l;
    std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t l : order)
      f(l);
  }
  template <typename F>
  void one(F&& f) {
    f();
  }
};

TEST(CasqFit, SameBitsWhateverTheOrderOfTheLanes) {
  for (uint32_t bits : {2u, 3u, 4u}) {
    for (uint32_t m : {1u, 100u, 4096u}) {
      SCOPED_TRACE(::testing::Message() << "bits " << bits << " m " << m);
      std::vector<float> x = make_data(Dist::kLaplace, m, bits * 100 + m);
      auto a = std::make_unique<detail::CasqFitScratch>();
      auto b = std::make_unique<detail::CasqFitScratch>();
      auto pa = std::make_unique<detail::CasqPartials>();
      auto pb = std::make_unique<detail::CasqPartials>();
      memcpy(a->sample, x.data(), m * 4);
      memcpy(b->sample, x.data(), m * 4);
      detail::CasqHostExec ea{pa.get()};
      ShuffledExec eb{pb.get()};
      detail::casq_fit(ea, m, bits, 500, 12345, a.get());
      detail::casq_fit(eb, m, bits, 500, 12345, b.get());
      EXPECT_EQ(0, memcmp(a->centers, b->centers, 4u << bits));
      EXPECT_EQ(0, memcmp(a->sizes, b->sizes, 4u << bits));
      uint32_t total = 0;
      for (uint32_t c = 0; c < (1u << bits); ++c)
        total += a->sizes[c];
      EXPECT_EQ(total, 500u);
      EXPECT_TRUE(std::is_sorted(a->centers, a->centers + (1u << bits)));
    }
  }
}

// Fixed-point bucket sums: any order gives the same integer; the mean is the fp64 mean to within
// rounding for values within 2^-20 of the largest.
TEST(CasqFit, FixedPointBucketMeansAreOrderFreeAndCloseToExact) {
  const size_t n = 262144;
  std::vector<float> x = make_data(Dist::kLaplace, n, 3);
  x[17] = 1e30f;  // a huge value sets the scale; the others are far below it
  uint32_t emax = 0;
  for (float v : x)
    emax = std::max(emax, detail::casq_exponent(v));
  const int head = detail::casq_fix_headroom(n);
  EXPECT_EQ(head, 19);
  const double unit = detail::casq_fix_scale(emax, head);
  int64_t fwd = 0, rev = 0;
  double exact = 0.0;
  for (size_t i = 0; i < 1000; ++i) {  // past x[17]: scaled by 1e25 it would overflow to Inf
    fwd += detail::casq_to_fix(x[1000 + i] * 1e25f, unit);
    rev += detail::casq_to_fix(x[1999 - i] * 1e25f, unit);
    exact += double(x[1000 + i] * 1e25f);
  }
  // Non-finite values are not summed (they travel in the non-finite mask).
  EXPECT_EQ(detail::casq_to_fix(std::numeric_limits<float>::infinity(), unit), 0);
  EXPECT_EQ(detail::casq_to_fix(std::numeric_limits<float>::quiet_NaN(), unit), 0);
  EXPECT_EQ(fwd, rev);
  EXPECT_NEAR(detail::casq_fix_mean(fwd, 1000, emax, head), exact / 1000,
              1e-6 * std::fabs(exact / 1000) + 1e-6 * 1e30 * std::ldexp(1.0, -40));
  // The largest value itself is exact, and so is a single value's mean.
  EXPECT_EQ(detail::casq_fix_mean(detail::casq_to_fix(1e30f, unit), 1, emax, head), 1e30f);
  EXPECT_EQ(detail::casq_fix_mean(detail::casq_to_fix(-3.0f, detail::casq_fix_scale(129, head)), 1,
                                  129, head),
            -3.0f);
  // The packet's table: every non-empty bucket's mean within 1e-5 relative of an fp64 mean of
  // the same bucket's values (Laplace data: all values within 2^-20 of the largest).
  std::vector<float> y = make_data(Dist::kLaplace, n, 4);
  CodecParams p = params_for(CodecId::kCasq3, n);
  const size_t bytes = packet_bytes(p, n);
  Packet pkt(bytes);
  ASSERT_TRUE(encode(p, y.data(), ElemType::kF32, n, pkt.data(), bytes).ok());
  std::vector<float> dec(n);
  ASSERT_TRUE(decode(p, pkt.data(), bytes, dec.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  // Values decoding to one table entry come from one bucket: their fp64 mean is that entry.
  std::vector<std::pair<float, float>> pairs(n);
  for (size_t i = 0; i < n; ++i)
    pairs[i] = {dec[i], y[i]};
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t groups = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double s = 0.0;
    while (j < n && pairs[j].first == pairs[i].first)
      s += pairs[j++].second;
    const double mean = s / double(j - i);
    EXPECT_NEAR(pairs[i].first, mean, 1e-5 * std::fabs(mean) + 1e-30) << "entry " << i;
    groups++;
    i = j;
  }
  EXPECT_GT(groups, 1000u);
}

}  // namespace
}  // namespace sketchccl::kernels
