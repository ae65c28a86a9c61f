// The time-to-accuracy benchmark's pieces: DDP's bucket assignment and launch order, the
// backward pass handing over each layer before the layers below are computed (what lets a
// bucket's AllReduce overlap them), its gradient against finite differences, the text task's
// hooked backward against its plain gradient, seeded initialisation, and the summary line.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "perf/train/convergence_tasks.h"
#include "perf/train/ddp.h"

namespace {

using convergence::Mlp;
using convergence::Rng;

TEST(Buckets, ReverseOrderFirstBucketSmallTensorsNeverSplit) {
  // tensors of 100, 100, 100, 1000 elements (4 bytes): reversed, 1000 fills the first bucket
  // (cap 400 B) alone; then 100+100 reach 800 B; the last 100 is what is left.
  const std::vector<ddp::Bucket> b = ddp::make_buckets({100, 100, 100, 1000}, 4, 800, 400);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].begin, 300u);
  EXPECT_EQ(b[0].end, 1300u);
  EXPECT_EQ(b[1].begin, 100u);
  EXPECT_EQ(b[1].end, 300u);
  EXPECT_EQ(b[2].begin, 0u);
  EXPECT_EQ(b[2].end, 100u);
}

TEST(Buckets, CoverTheVectorOnceInDecreasingOrder) {
  const Mlp m({64, 1024, 1024, 10});  // digits-wide
  const std::vector<ddp::Bucket> b = ddp::make_buckets(m.tensor_sizes(), 4, 25u << 20, 1u << 20);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front().end, m.nparams());
  EXPECT_EQ(b.back().begin, 0u);
  for (size_t k = 1; k < b.size(); ++k)
    EXPECT_EQ(b[k].end, b[k - 1].begin);
  // the first bucket closes at the first tensor that takes it to 1 MiB: the 1024x1024 weights
  EXPECT_EQ(b[0].begin, m.weights(1));
}

TEST(BucketLauncher, LaunchesInBucketOrderAsSoonAsComplete) {
  std::vector<size_t> launched;
  ddp::BucketLauncher l({{200, 300}, {100, 200}, {0, 100}},
                        [&](size_t k) { launched.push_back(k); });
  l.ready(250, 300);
  EXPECT_TRUE(launched.empty());  // half of bucket 0
  l.ready(100, 200);
  EXPECT_TRUE(launched.empty());  // bucket 1 is complete but waits for bucket 0
  l.ready(200, 250);
  EXPECT_EQ(launched, (std::vector<size_t>{0, 1}));
  l.ready(0, 100);
  EXPECT_EQ(launched, (std::vector<size_t>{0, 1, 2}));
  l.reset();
  EXPECT_EQ(l.launched(), 0u);
  l.ready(0, 300);
  EXPECT_EQ(launched.size(), 6u);
}

struct Batch {
  std::vector<float> x;
  std::vector<int> y;
};
Batch random_batch(size_t B, size_t D, int C, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (size_t i = 0; i < B * D; ++i)
    b.x.push_back(rng.uniform() < 0.3 ? 0.0f : static_cast<float>(rng.uniform()));
  for (size_t s = 0; s < B; ++s)
    b.y.push_back(static_cast<int>(rng.below(static_cast<size_t>(C))));
  return b;
}

double mean_loss(const Mlp& m, const std::vector<float>& w, const Batch& b, size_t B, int C) {
  std::vector<std::vector<float>> acts;
  m.forward(w.data(), b.x.data(), B, &acts);
  double l = 0;
  for (size_t s = 0; s < B; ++s)
    l += convergence::softmax_xent(&acts.back()[s * static_cast<size_t>(C)], C, b.y[s], nullptr,
                                   nullptr);
  return l / static_cast<double>(B);
}

TEST(MlpBackward, EachLayerIsFinalBeforeTheLayersBelowAreComputed) {
  const Mlp m({8, 32, 32, 4});
  Rng rng(7);
  std::vector<float> w;
  m.init(&w, &rng);
  const Batch b = random_batch(5, 8, 4, 3);
  std::vector<std::vector<float>> acts;
  m.forward(w.data(), b.x.data(), 5, &acts);
  std::vector<float> full(m.nparams());
  m.backward(w.data(), acts, b.y.data(), 5, &full, [](size_t, size_t) {});

  // one bucket per tensor: each launch sees its own range final and the first layer untouched
  const std::vector<ddp::Bucket> buckets = ddp::make_buckets(m.tensor_sizes(), 4, 1, 1);
  std::vector<float> g(m.nparams(), 1.0f);
  std::vector<size_t> order;
  size_t launched_before_first_layer = 0;
  ddp::BucketLauncher l(buckets, [&](size_t k) {
    order.push_back(k);
    for (size_t i = buckets[k].begin; i < buckets[k].end; ++i)
      ASSERT_EQ(g[i], full[i]) << "bucket " << k << " launched before it was final";
    bool first_layer_done = false;
    for (size_t i = m.weights(0); i < m.biases(0); ++i)
      first_layer_done = first_layer_done || g[i] != 0.0f;
    if (!first_layer_done) ++launched_before_first_layer;
  });
  m.backward(w.data(), acts, b.y.data(), 5, &g, [&](size_t lo, size_t hi) { l.ready(lo, hi); });
  EXPECT_EQ(l.launched(), buckets.size());
  for (size_t k = 0; k < order.size(); ++k)
    EXPECT_EQ(order[k], k);
  // the last two layers' four tensors go out while the first layer's gradient is still to come
  EXPECT_EQ(launched_before_first_layer, 4u);
  EXPECT_EQ(g, full);
}

TEST(MlpBackward, MatchesFiniteDifferences) {
  const Mlp m({6, 16, 12, 3});
  Rng rng(11);
  std::vector<float> w;
  m.init(&w, &rng);
  for (size_t l = 0; l < m.layers(); ++l) {  // non-zero biases, so that their gradients matter
    for (size_t o = 0; o < m.out(l); ++o)
      w[m.biases(l) + o] = 0.1f * static_cast<float>(rng.normal());
  }
  const Batch b = random_batch(4, 6, 3, 5);
  std::vector<std::vector<float>> acts;
  m.forward(w.data(), b.x.data(), 4, &acts);
  std::vector<float> g(m.nparams());
  m.backward(w.data(), acts, b.y.data(), 4, &g, [](size_t, size_t) {});
  Rng pick(13);
  for (int t = 0; t < 40; ++t) {
    const size_t i = pick.below(m.nparams());
    std::vector<float> wp = w, wm = w;
    const float h = 1e-3f;
    wp[i] += h;
    wm[i] -= h;
    const double num = (mean_loss(m, wp, b, 4, 3) - mean_loss(m, wm, b, 4, 3)) / (2.0 * h);
    EXPECT_NEAR(g[i], num, 2e-3 + 2e-2 * std::fabs(num)) << "parameter " << i;
  }
}

TEST(TextBackward, SameBitsAsTheGradientClassifierFirst) {
  const convergence::Text t(3);
  std::vector<float> w;
  t.init(&w, 3);
  std::vector<size_t> idx;
  for (size_t s = 0; s < 32; ++s)
    idx.push_back(s * 7);
  std::vector<float> plain, hooked(t.nparams(), 5.0f);
  t.gradient(w, idx, &plain);
  const size_t emb = static_cast<size_t>(convergence::Text::V) * convergence::Text::E;
  std::vector<std::pair<size_t, size_t>> ready;
  t.backward(w, idx, &hooked, [&](size_t lo, size_t hi) { ready.emplace_back(lo, hi); });
  EXPECT_EQ(hooked, plain);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0], std::make_pair(emb, t.nparams()));
  EXPECT_EQ(ready[1], std::make_pair(size_t{0}, emb));
}

TEST(Seeds, TheSameSeedGivesTheSameModel) {
  const Mlp m({64, 2048, 2048, 2048, 2048, 10});  // digits-deep
  EXPECT_GE(m.nparams(), 10000000u);
  EXPECT_LE(m.nparams(), 30000000u);
  const convergence::Text t(1);
  std::vector<float> a, b, c;
  t.init(&a, 1);
  t.init(&b, 1);
  t.init(&c, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(TimeToAccuracy, FirstTimeAtOrAboveTheTarget) {
  const std::vector<ddp::Point> exact = {{0, 0.1}, {1, 0.8}, {2, 0.95}, {3, 0.96}};
  const double target = ddp::target_of(exact, 0.5);
  EXPECT_NEAR(target, 0.955, 1e-12);
  EXPECT_EQ(ddp::time_to_accuracy(exact, target), 3);
  const std::vector<ddp::Point> fast = {{0, 0.1}, {0.5, 0.96}, {0.7, 0.90}};
  EXPECT_EQ(ddp::time_to_accuracy(fast, target), 0.5);
  EXPECT_LT(ddp::time_to_accuracy({{0, 0.1}, {9, 0.95}}, target), 0);
}

TEST(TimeToAccuracy, SummaryLinesInTheDemoForm) {
  const std::string hit = ddp::summary_line("digits-wide", "q8", 2.0, 0.955, 0.96, 6.0, 4.0);
  EXPECT_EQ(hit,
            "  time-to-accuracy digits-wide q8: 2.0 s to 95.5% (3.00x exact fp32, 2.00x bf16)");
  const std::string miss = ddp::summary_line("text", "s2", -1, 0.9, 0.853, 6.0, 4.0);
  EXPECT_EQ(miss, "  time-to-accuracy text s2: never reached 90.0% (final 85.3%)");
  const std::regex form(
      R"(  time-to-accuracy \S+ \S+: ([0-9.]+ s to [0-9.]+% \(([0-9.]+x|n/a) exact fp32, ([0-9.]+x|n/a) bf16\)|never reached [0-9.]+% \(final [0-9.]+%\)))");
  EXPECT_TRUE(std::regex_match(hit, form));
  EXPECT_TRUE(std::regex_match(miss, form));
  EXPECT_TRUE(std::regex_match(ddp::summary_line("t", "c", 1, 0.5, 0.5, -1, 2), form));
}

}  // namespace
