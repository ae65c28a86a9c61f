// s2 never silently lossy (coll/s2_repair.h), the engine end to end with ranks as threads over
// loopback sockets: embedding-style gradients (rows of 64 contiguous non-zeros, 1% of the rows
// per rank, partly shared) reduced three times in one buffer come out exact on every call and
// the same bits on every rank, in place or not, AllReduce and ReduceScatter; with the repair off
// and error feedback on, what did not peel comes out as 0 and comes back in the next call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/codec_common.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/s2_repair.h"
#include "tests/unit/coll/engine_ranks.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using testutil::EngineRanks;

constexpr int kRanks = 4;
constexpr size_t kCount = size_t(1) << 20;
constexpr size_t kRow = 64;

// Rank r's gradient of call `call`: 1% of the rows, half of them from rows every rank draws from
// (so the ranks' supports partly overlap), 64 contiguous Gaussian values each. `same_rows`: the
// rows of every call are the first call's (new values); else each call draws new rows, so a
// slice's support moves by about 10% from call to call.
void embedding_gradient(int r, int call, bool same_rows, std::vector<float>* x) {
  const size_t rows = kCount / kRow, mine = rows / 100;
  std::fill(x->begin(), x->end(), 0.0f);
  const int rows_of = same_rows ? 1 : call;
  std::mt19937_64 shared(1000 + rows_of), own(2000 + 17 * rows_of + r);
  std::mt19937_64 values(3000 + 17 * call + r);
  std::uniform_int_distribution<size_t> row(0, rows - 1);
  std::normal_distribution<float> val(0.0f, 1.0f);
  std::vector<size_t> pool(mine);
  for (size_t& v : pool)
    v = row(shared);
  for (size_t k = 0; k < mine; ++k) {
    const size_t w = k % 2 == 0 ? pool[(k + static_cast<size_t>(r) * 31) % mine] : row(own);
    for (size_t j = 0; j < kRow; ++j)
      (*x)[w * kRow + j] = val(values);
  }
}

struct Error {
  double nmse = 0, maxrel = 0;  // maxrel: max |y - s| / max |s|
  size_t beyond_rounding = 0;   // elements off by more than fp32 summation order allows
};
// y against the exact sum of xs over [first, first + y.size()).
Error error_of(const std::vector<std::vector<float>>& xs, const float* y, size_t first, size_t n) {
  Error e;
  double err = 0, ref = 0, maxs = 0, maxd = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = 0, mag = 0;
    for (const auto& x : xs) {
      s += x[first + i];
      mag += std::fabs(x[first + i]);
    }
    const double d = std::fabs(static_cast<double>(y[i]) - s);
    err += d * d;
    ref += s * s;
    maxs = std::max(maxs, std::fabs(s));
    maxd = std::max(maxd, d);
    // P - 1 fp32 additions, each rounding by at most half an ulp of a partial sum.
    if (d > 4e-7 * kRanks * mag) e.beyond_rounding++;
  }
  e.nmse = ref > 0 ? err / ref : err;
  e.maxrel = maxs > 0 ? maxd / maxs : maxd;
  return e;
}

void expect_same_bits(const std::vector<std::vector<float>>& y, size_t n) {
  for (size_t r = 1; r < y.size(); ++r) {
    EXPECT_EQ(std::memcmp(y[r].data(), y[0].data(), n * sizeof(float)), 0) << "rank " << r;
  }
}

Settings s2_settings(bool repair) {
  Settings s;
  s.auto_codec = false;
  s.codec = CodecId::kS2;
  s.s2_repair = repair;
  return s;
}

const CodecStats& s2_stats(EngineRanks& ranks, int r) {
  return ranks.stats(r, CodecId::kS2);
}

// Call `call` with new rows: each rank's embedding gradient into x[r], reduced into y[r] (each
// rank's chunk of it, `scatter`).
void run_new_rows(EngineRanks& ranks, int call, std::vector<std::vector<float>>* x,
                  std::vector<std::vector<float>>* y, bool scatter) {
  for (int r = 0; r < kRanks; ++r)
    embedding_gradient(r, call, false, &(*x)[r]);
  ranks.run(static_cast<uint32_t>(call), *x, y, scatter);
}

// Embedding-style support: three calls on one buffer, each exact to fp32 summation order on every
// rank. `repair` false: the per-slice budget alone (figures only, no checks).
void clustered_allreduce(bool in_place, bool same_rows, bool repair = true) {
  EngineRanks ranks(kRanks, s2_settings(repair), 60);
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> y(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> ref(kRanks);
  CodecStats before;
  for (int call = 1; call <= 3; ++call) {
    std::vector<const float*> send;
    std::vector<float*> recv;
    for (int r = 0; r < kRanks; ++r) {
      embedding_gradient(r, call, same_rows, &x[r]);
      ref[r] = x[r];
      if (in_place) y[r] = x[r];
      send.push_back(in_place ? y[r].data() : x[r].data());
      recv.push_back(y[r].data());
    }
    ranks.run(static_cast<uint32_t>(call), send, recv, kCount);
    const Error e = error_of(ref, y[0].data(), 0, kCount);
    const CodecStats& c = s2_stats(ranks, 0);
    auto delta = [](uint64_t now, uint64_t was) {
      return static_cast<unsigned long long>(now - was);
    };
    std::printf(
        "[ info ] %s, %s rows, repair %s, call %d: NMSE %.3g, max rel %.3g, %zu beyond "
        "rounding; peeled %llu of %llu, repaired %llu, repair bytes %llu of %llu sent\n",
        in_place ? "in place" : "out of place", same_rows ? "same" : "new", repair ? "on" : "off",
        call, e.nmse, e.maxrel, e.beyond_rounding, delta(c.s2_peeled, before.s2_peeled),
        delta(c.s2_nonzeros, before.s2_nonzeros), delta(c.s2_repaired, before.s2_repaired),
        delta(c.s2_repair_bytes_sent, before.s2_repair_bytes_sent),
        delta(c.bytes_sent, before.bytes_sent));
    before = c;
    if (!repair) continue;
    EXPECT_EQ(e.beyond_rounding, 0u) << "call " << call;
    EXPECT_LT(e.maxrel, 1e-6) << "call " << call;
    EXPECT_LT(e.nmse, 1e-12) << "call " << call;
    expect_same_bits(y, kCount);
  }
  for (int r = 1; r < kRanks; ++r)
    EXPECT_EQ(s2_stats(ranks, r).s2_repaired, s2_stats(ranks, 0).s2_repaired);
}

TEST(S2Exact, ClusteredSupportIsExactOnEveryCallAndRank) {
  clustered_allreduce(false, true);
  clustered_allreduce(false, true, false);  // the figures of the per-slice budget alone
}

// New rows every call: slices whose support grows past the budget's headroom do not peel fully.
TEST(S2Exact, ClusteredSupportThatMovesIsExact) {
  clustered_allreduce(false, false);
  clustered_allreduce(false, false, false);
}

// In place, the ring overwrites the input before the repair reads it: the engine keeps it.
TEST(S2Exact, ClusteredSupportInPlaceIsExact) {
  clustered_allreduce(true, false);
}

// Thin sketches (0.9 counters per non-zero) leave thousands of positions to the repair.
TEST(S2Exact, ABudgetFarBelowThePeelingThresholdIsStillExact) {
  Settings s = s2_settings(true);
  s.s2_budget = 0.04;  // ~0.9 counters per union non-zero on the first call
  s.s2_counters_per_nz = 0.9;
  EngineRanks ranks(kRanks, s, 60);
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> y(kRanks, std::vector<float>(kCount));
  for (int call = 1; call <= 2; ++call) {
    run_new_rows(ranks, call, &x, &y, false);
    const Error e = error_of(x, y[0].data(), 0, kCount);
    EXPECT_EQ(e.beyond_rounding, 0u) << "call " << call;
    expect_same_bits(y, kCount);
  }
  EXPECT_GT(s2_stats(ranks, 0).s2_repaired, 1000u);
  std::printf(
      "[ info ] 0.9 counters per non-zero: repaired %llu of %llu, repair bytes %llu of "
      "%llu sent\n",
      static_cast<unsigned long long>(s2_stats(ranks, 0).s2_repaired),
      static_cast<unsigned long long>(s2_stats(ranks, 0).s2_nonzeros),
      static_cast<unsigned long long>(s2_stats(ranks, 0).s2_repair_bytes_sent),
      static_cast<unsigned long long>(s2_stats(ranks, 0).bytes_sent));
}

// bf16, ncclAvg, in place, thin sketches: the repaired values go through the element type and the
// scale like the rest (each element the exact mean rounded to bf16, up to fp32 summation order).
TEST(S2Exact, Bf16AverageInPlaceIsExact) {
  Settings s = s2_settings(true);
  s.s2_budget = 0.04;
  EngineRanks ranks(kRanks, s, 60);
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<uint16_t>> buf(kRanks, std::vector<uint16_t>(kCount));
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (int r = 0; r < kRanks; ++r) {
    embedding_gradient(r, 1, true, &x[r]);
    for (size_t i = 0; i < kCount; ++i) {
      buf[r][i] = kernels::detail::float_to_bf16(x[r][i]);
      x[r][i] = kernels::detail::bf16_to_float(buf[r][i]);  // the input as the ranks hold it
    }
    send.push_back(buf[r].data());
    recv.push_back(buf[r].data());
  }
  ranks.run(1, send, recv, kCount, false, kernels::ElemType::kBf16, true);
  size_t off = 0;
  for (size_t i = 0; i < kCount; ++i) {
    double sum = 0, mag = 0;
    for (const auto& xr : x) {
      sum += xr[i];
      mag += std::fabs(xr[i]);
    }
    const double mean = sum / kRanks, got = kernels::detail::bf16_to_float(buf[0][i]);
    // Half a bf16 ulp of the mean, plus the fp32 sums' order.
    if (std::fabs(got - mean) > std::fabs(mean) / 256 + 1e-6 * mag) off++;
  }
  EXPECT_EQ(off, 0u);
  for (int r = 1; r < kRanks; ++r)
    EXPECT_EQ(buf[r], buf[0]) << "rank " << r;
  EXPECT_GT(s2_stats(ranks, 0).s2_repaired, 0u);
}

// A ReduceScatter: each rank knows its chunk's unresolved positions; they are gathered and
// reduced exactly, each rank's chunk exact.
TEST(S2Exact, ReduceScatterIsExactOnEveryChunk) {
  Settings s = s2_settings(true);
  s.s2_budget = 0.04;
  EngineRanks ranks(kRanks, s, 60);
  const size_t rc = kCount / kRanks;
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> y(kRanks, std::vector<float>(rc));
  for (int call = 1; call <= 2; ++call) {
    run_new_rows(ranks, call, &x, &y, true);
    for (int r = 0; r < kRanks; ++r) {
      const Error e = error_of(x, y[r].data(), static_cast<size_t>(r) * rc, rc);
      EXPECT_EQ(e.beyond_rounding, 0u) << "call " << call << " rank " << r;
    }
  }
  EXPECT_GT(s2_stats(ranks, 0).s2_repaired, 0u);
  for (int r = 1; r < kRanks; ++r)
    EXPECT_EQ(s2_stats(ranks, r).s2_repaired, s2_stats(ranks, 0).s2_repaired);
}

// SKETCHCCL_S2_REPAIR=0 with error feedback: every output is the exact sum or 0 (not peeled), and
// a position lost in one call comes back in the next with both calls' values.
TEST(S2Exact, LossyWithErrorFeedbackZeroesWhatItLostAndSendsItAgain) {
  Settings s = s2_settings(false);
  s.error_feedback = true;
  s.s2_budget = 0.04;          // ~0.9 counters per non-zero: lossy
  s.s2_counters_per_nz = 2.0;  // the second call peels everything
  EngineRanks ranks(kRanks, s, 60);
  std::vector<std::vector<float>> x(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> y1(kRanks, std::vector<float>(kCount)), y2 = y1;
  for (int r = 0; r < kRanks; ++r)
    embedding_gradient(r, 1, true, &x[r]);
  ranks.run(1, x, &y1);
  ranks.run(2, x, &y2);  // the same gradient again
  expect_same_bits(y1, kCount);
  expect_same_bits(y2, kCount);
  size_t lost = 0, came_back = 0, wrong = 0;
  for (size_t i = 0; i < kCount; ++i) {
    double sum = 0, mag = 0;
    for (const auto& xr : x) {
      sum += xr[i];
      mag += std::fabs(xr[i]);
    }
    const double tol = 1e-6 * (mag + 1e-30);
    auto near = [&](double v, double want) { return std::fabs(v - want) <= tol * 2; };
    if (near(y1[0][i], sum)) {
      if (!near(y2[0][i], sum) && y2[0][i] != 0.0f) wrong++;
    } else if (y1[0][i] == 0.0f) {
      lost++;
      if (near(y2[0][i], 2 * sum)) {
        came_back++;
      } else if (y2[0][i] != 0.0f) {
        wrong++;
      }
    } else {
      wrong++;
    }
  }
  std::printf(
      "[ info ] lossy s2 with error feedback: %zu lost in call 1, %zu of them back in "
      "call 2\n",
      lost, came_back);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(lost, 100u);
  EXPECT_GT(came_back, lost * 95 / 100);
  EXPECT_GT(s2_stats(ranks, 0).ef_input_sq, 0.0);
  EXPECT_GT(s2_stats(ranks, 0).ef_residual_sq, 0.0);
  EXPECT_EQ(s2_stats(ranks, 0).s2_repaired, 0u);
}

// The per-slice budget: a slice's counters follow its own previous support.
TEST(S2Exact, EachSliceIsSizedFromItsOwnSupport) {
  S2SliceSupport prev;
  prev[0] = {1000, 100};
  prev[1000] = {1000, 300};
  const uint32_t a = s2_slice_counters(prev, 400, 2000, 0, 1000, 3, 1.3);
  const uint32_t b = s2_slice_counters(prev, 400, 2000, 1000, 1000, 3, 1.3);
  EXPECT_EQ(a, kernels::s2_counters_for_support(100, 3, 1.3));
  EXPECT_EQ(b, kernels::s2_counters_for_support(300, 3, 1.3));
  // A slice the previous call did not cut alike: the total spread evenly.
  EXPECT_EQ(s2_slice_counters(prev, 400, 2000, 0, 500, 3, 1.3),
            kernels::s2_counters_for_support(100, 3, 1.3));
  S2SliceSupport other = prev;
  other[1000].second = 301;
  EXPECT_NE(s2_slice_support_hash(prev), s2_slice_support_hash(other));
}

}  // namespace
}  // namespace sketchccl::coll
