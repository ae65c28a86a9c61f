// CASQ's fit and levels (kernels/casq_fit.h, codec_impl.h): the same bits whatever order the
// lanes run in, as on the GPU where they are threads; levels sorted in [-1, 1]
// with the ends pinned (and 0 for sparse values); every decoded value a level times its
// sub-block's scale, each sub-block's largest value exact when bf16 holds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/casq_fit.h"
#include "tests/unit/kernels/codec_test_util.h"

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
      for (Dist d : {Dist::kLaplace, Dist::kSparse1}) {
        SCOPED_TRACE(::testing::Message() << "bits " << bits << " m " << m << " dist " << int(d));
        std::vector<float> x = make_data(d, m, bits * 100 + m);
        for (float& v : x)
          v = std::max(-1.0f, std::min(1.0f, v / 8.0f));  // normalised values
        auto a = std::make_unique<detail::CasqFitScratch>();
        auto b = std::make_unique<detail::CasqFitScratch>();
        auto pa = std::make_unique<detail::CasqPartials>();
        auto pb = std::make_unique<detail::CasqPartials>();
        memcpy(a->sample, x.data(), m * 4);
        memcpy(b->sample, x.data(), m * 4);
        detail::CasqHostExec ea{pa.get()};
        ShuffledExec eb{pb.get()};
        detail::casq_fit(ea, m, bits, 12345, nullptr, a.get());
        detail::casq_fit(eb, m, bits, 12345, nullptr, b.get());
        const uint32_t K = 1u << bits;
        EXPECT_EQ(0, memcmp(a->centers, b->centers, 4 * K));
        EXPECT_TRUE(std::is_sorted(a->centers, a->centers + K));
        EXPECT_EQ(a->centers[0], -1.0f);
        EXPECT_EQ(a->centers[K - 1], 1.0f);
        // Mostly zeros: 0 is a level, so zeros stay exact.
        size_t zeros = size_t(std::count(x.begin(), x.end(), 0.0f));
        if (2 * zeros >= m) {
          EXPECT_NE(std::find(a->centers, a->centers + K, 0.0f), a->centers + K);
        }
      }
    }
  }
}

// Decoded values are levels times the sub-block's scale (its largest |value| rounded up to bf16):
// a largest |value| that bf16 holds decodes exactly, no decoded |value| exceeds its sub-block's
// scale, zeros of sparse data decode as 0, and an all-zero block costs nothing.
TEST(CasqFit, BlockScalesKeepExtremesAndZerosExact) {
  const size_t n = 5000;
  for (CodecId c : {CodecId::kCasq2, CodecId::kCasq4}) {
    for (bool nearest : {false, true}) {
      SCOPED_TRACE(::testing::Message() << codec_name(c) << " nearest " << nearest);
      std::vector<float> x = make_data(Dist::kSparse1, n, 5);
      for (size_t i = 0; i < 256; ++i)
        x[256 + i] = 0.0f;  // block 1: all zeros
      x[700] = 1e30f;       // an outlier: only its sub-block's scale grows
      std::vector<float> xr = x;
      for (float& v : xr)  // bf16 values: the scales hold them exactly
        v = detail::u2f(detail::f2u(v) & 0xffff0000u);
      CodecParams p = params_for(c, n);
      p.casq_nearest = nearest;
      const size_t bytes = packet_bytes(p, n);
      Packet pkt(bytes);
      Packet pr(bytes);
      ASSERT_TRUE(encode(p, x.data(), ElemType::kF32, n, pkt.data(), bytes).ok());
      ASSERT_TRUE(encode(p, xr.data(), ElemType::kF32, n, pr.data(), bytes).ok());
      std::vector<float> y(n), yr(n);
      ASSERT_TRUE(decode(p, pkt.data(), bytes, y.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
      ASSERT_TRUE(decode(p, pr.data(), bytes, yr.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
      for (size_t base = 0; base < n; base += detail::kCasqSub) {
        size_t arg = base;
        for (size_t i = base; i < std::min(n, base + detail::kCasqSub); ++i) {
          if (std::fabs(x[i]) > std::fabs(x[arg])) arg = i;
          if (x[i] == 0.0f) {
            EXPECT_EQ(y[i], 0.0f) << i;
          }
        }
        const float s = detail::casq_scale(detail::casq_abs_bits(x[arg]));
        EXPECT_GE(s, std::fabs(x[arg]));
        EXPECT_LE(s, std::fabs(x[arg]) * (1.0f + 1.0f / 128));
        for (size_t i = base; i < std::min(n, base + detail::kCasqSub); ++i)
          EXPECT_LE(std::fabs(y[i]), s) << i;
        EXPECT_EQ(yr[arg], xr[arg]) << "sub-block " << base / detail::kCasqSub;
      }
      EXPECT_EQ(yr[700], xr[700]);
    }
  }
}

}  // namespace
}  // namespace sketchccl::kernels
