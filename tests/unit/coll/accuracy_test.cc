// The accuracy guard (coll/accuracy.h): the sample, the ladder, and the engine end to end with
// ranks as threads over loopback sockets: the estimate against the true NMSE of the call, the
// same estimate on every rank, and SKETCHCCL_MAX_NMSE stepping a q2 buffer up until it holds.
#include "src/coll/accuracy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "src/coll/reduction_engine.h"
#include "tests/unit/coll/engine_ranks.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using testutil::AllowWarnings;
using testutil::EngineRanks;

size_t popcount(const std::vector<uint64_t>& bits) {
  size_t n = 0;
  for (uint64_t w : bits)
    n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

TEST(AccuracySample, OnePositionPerStratumFromTheCallOnly) {
  EXPECT_EQ(sample_count(0), 0u);
  EXPECT_EQ(sample_count(100), 100u);
  EXPECT_EQ(sample_count(10000), kMinSamples);
  EXPECT_EQ(sample_count(size_t(1) << 24), (size_t(1) << 24) / kSampleStride);
  for (size_t count : {size_t(1), size_t(255), size_t(1000), size_t(1) << 20, size_t(3000017)}) {
    std::vector<uint64_t> a, b, c;
    sample_bitmap(7, 42, count, &a);
    sample_bitmap(7, 42, count, &b);
    sample_bitmap(7, 43, count, &c);
    EXPECT_EQ(a, b) << count;
    EXPECT_EQ(popcount(a), sample_count(count)) << count;
    if (count > 1000) {
      EXPECT_NE(a, c) << "the next call samples other positions";
    }
    // Nothing at or above count.
    for (size_t i = count; i < a.size() * 64; ++i)
      ASSERT_FALSE((a[i / 64] >> (i % 64)) & 1) << count << " " << i;
  }
}

TEST(AccuracyEstimate, NmseAndMaxRel) {
  const std::vector<float> exact = {1, -2, 2, 0};
  const std::vector<float> dec = {1.5f, -2, 2, 0.5f};
  const AccuracyEstimate e = estimate_accuracy(dec.data(), exact.data(), exact.size());
  EXPECT_DOUBLE_EQ(e.nmse, 0.5 / 9);
  EXPECT_DOUBLE_EQ(e.maxrel, 0.25);
  const std::vector<float> bad = {NAN, -2, 2, 0};
  EXPECT_GT(estimate_accuracy(bad.data(), exact.data(), 4).nmse, 1e100);
}

TEST(AccuracyGuard, TheLadder) {
  auto path = [](CodecId c) {
    std::string s = kernels::codec_name(c);
    for (int i = 0; i < 8 && is_lossy(c); ++i) {
      c = safer_codec(c);
      s += std::string(" ") + kernels::codec_name(c);
    }
    return s;
  };
  EXPECT_EQ(path(CodecId::kQ2), "q2 q4 q8 bf16 none");
  EXPECT_EQ(path(CodecId::kCasq2), "casq2 casq3 casq4 q8 bf16 none");
  EXPECT_EQ(path(CodecId::kFp16), "fp16 none");
  EXPECT_EQ(path(CodecId::kS2), "s2 sparse");
  EXPECT_EQ(guarded_codec(CodecId::kQ2, 2), CodecId::kQ8);
  EXPECT_EQ(guarded_codec(CodecId::kQ2, 99), CodecId::kNone);
  EXPECT_EQ(guarded_codec(CodecId::kSparse, 3), CodecId::kSparse);

  GuardState g;
  EXPECT_FALSE(guard_step_up(0, CodecId::kQ2, 10, &g)) << "0 is off";
  EXPECT_FALSE(guard_step_up(1e-3, CodecId::kQ2, 1e-3, &g)) << "at the bound is within it";
  EXPECT_FALSE(guard_step_up(1e-3, CodecId::kNone, 1, &g)) << "exact codecs have no step";
  EXPECT_TRUE(guard_step_up(1e-3, CodecId::kQ2, 2e-3, &g));
  EXPECT_EQ(g.steps, 1);
}

TEST(AccuracyStats, JsonHasMeanAndWorstPerCodec) {
  CommStats st;
  CodecStats& q = st.by_codec["q4"];
  q.calls = 2;
  q.estimated_calls = 2;
  q.estimated_nmse_sum = 0.3;
  q.estimated_nmse_worst = 0.2;
  q.estimated_maxrel_sum = 1.0;
  q.estimated_maxrel_worst = 0.75;
  q.sample_bytes_sent = 4096;
  q.guard_steps = 1;
  st.by_codec["none"].calls = 1;
  const std::string j = st.to_json(0, 2, 1);
  EXPECT_NE(j.find("\"q4\": {\"calls\": 2"), std::string::npos) << j;
  EXPECT_NE(j.find("\"estimated_nmse\": {\"mean\": 0.15, \"worst\": 0.2}, "
                   "\"estimated_maxrel\": {\"mean\": 0.5, \"worst\": 0.75}, "
                   "\"estimated_calls\": 2, \"sample_bytes_sent\": 4096, \"guard_steps\": 1"),
            std::string::npos)
      << j;
  // Exact codecs make no estimate and say nothing about one ("none" sorts before "q4").
  const size_t none = j.find("\"none\""), q4 = j.find("\"q4\"");
  ASSERT_LT(none, q4) << j;
  EXPECT_EQ(j.substr(none, q4 - none).find("estimated"), std::string::npos) << j;
}

enum class Data { kGauss, kLaplace, kSparse };

void fill(Data d, uint64_t seed, std::vector<float>* x) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::exponential_distribution<float> expo(1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : *x) {
    switch (d) {
      case Data::kGauss:
        v = gauss(g);
        break;
      case Data::kLaplace:
        v = (u(g) < 0.5f ? -1.0f : 1.0f) * expo(g);
        break;
      case Data::kSparse:
        v = u(g) < 0.1f ? gauss(g) : 0.0f;
        break;
    }
  }
}

double true_nmse(const std::vector<std::vector<float>>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double s = 0;
    for (const auto& xr : x)
      s += xr[i];
    err += (y[i] - s) * (y[i] - s);
    ref += s * s;
  }
  return ref > 0 ? err / ref : err;
}

double last_estimate(const CodecStats& c, double* before) {
  const double e = c.estimated_nmse_sum - *before;
  *before = c.estimated_nmse_sum;
  return e;
}

// The estimate of the last call, which every rank must have computed bit for bit alike.
double agreed_estimate(EngineRanks& ranks, int p, CodecId codec, std::vector<double>* before) {
  std::vector<double> est(p);
  for (int r = 0; r < p; ++r) {
    est[r] =
        last_estimate(ranks.engine(r).stats().by_codec[kernels::codec_name(codec)], &(*before)[r]);
  }
  for (int r = 1; r < p; ++r)
    EXPECT_EQ(est[r], est[0]) << kernels::codec_name(codec) << " rank " << r;
  return est[0];
}

// In the sanitizer builds (SKETCHCCL_TEST_SANITIZED, tests/unit/meson.build) the calls check
// memory and arithmetic, which one seed and one codec per family do (a linear quantizer, CASQ,
// the sketch) as well as all of them (minutes there); the statistics are the normal build's.
#ifdef SKETCHCCL_TEST_SANITIZED
constexpr uint64_t kEstimateSeeds = 1;
const std::vector<CodecId> kEstimateCodecs = {CodecId::kQ4, CodecId::kCasq2, CodecId::kS2};
#else
constexpr uint64_t kEstimateSeeds = 4;
const std::vector<CodecId> kEstimateCodecs = {CodecId::kBf16,  CodecId::kFp16,  CodecId::kQ8,
                                              CodecId::kQ4,    CodecId::kQ2,    CodecId::kCasq2,
                                              CodecId::kCasq3, CodecId::kCasq4, CodecId::kS2};
#endif

TEST(AccuracyEngine, EstimateWithinTwiceTheTrueNmseAndTheSameOnEveryRank) {
  const int p = 3;
  const size_t count = size_t(1) << 20;  // 512 samples
  for (CodecId codec : kEstimateCodecs) {
    Settings s;
    s.auto_codec = false;
    s.codec = codec;
    // s2 keeps its losses (the repair, SKETCHCCL_S2_REPAIR, would make every call exact).
    s.s2_repair = false;
    s.s2_budget = 0.5;  // s2: too few counters for any of these (s2 is exact when it has enough)
    EngineRanks ranks(p, s, 30);
    std::vector<double> before(p, 0);
    uint32_t call = 0;
    double lo = 1e300, hi = 0;  // estimate / true, for docs/engine.md
    // Every call a first call of its own buffer on every rank: the inputs stay allocated, so no
    // rank's allocator hands one call's address to the next (the history would then differ).
    std::list<std::vector<std::vector<float>>> inputs;
    std::vector<std::vector<float>> y(p, std::vector<float>(count));
    for (Data d : {Data::kGauss, Data::kLaplace, Data::kSparse}) {
      for (uint64_t seed = 1; seed <= kEstimateSeeds; ++seed) {
        std::vector<std::vector<float>>& x = inputs.emplace_back(p, std::vector<float>(count));
        for (int r = 0; r < p; ++r)
          fill(d, seed * 1000 + r, &x[r]);
        ranks.run(++call, x, &y);
        const double want = true_nmse(x, y[0]);
        const double est = agreed_estimate(ranks, p, codec, &before);
        SCOPED_TRACE(::testing::Message()
                     << kernels::codec_name(codec) << " data " << int(d) << " seed " << seed
                     << ": true " << want << " estimated " << est);
        if (want < 1e-10) {
          EXPECT_LT(est, 1e-10);  // exact up to fp32 rounding: nothing to compare
        } else {
          EXPECT_GE(est, want / 2);
          EXPECT_LE(est, want * 2);
          lo = std::min(lo, est / want);
          hi = std::max(hi, est / want);
        }
      }
    }
    std::printf("[ info ] %s: estimate / true NMSE in [%.3f, %.3f] over %d calls\n",
                kernels::codec_name(codec), lo, hi, static_cast<int>(3 * kEstimateSeeds));
  }
}

// A ReduceScatter decodes one chunk per rank; its estimate gathers the sampled decoded values,
// so it is the whole call's, and the same on every rank.
TEST(AccuracyEngine, ReduceScatterEstimateIsTheWholeCallsOnEveryRank) {
  const int p = 3;
  const size_t count = (size_t(1) << 18) * p;  // 384 samples
  for (CodecId codec : {CodecId::kQ8, CodecId::kQ4, CodecId::kCasq2}) {
    Settings s;
    s.auto_codec = false;
    s.codec = codec;
    EngineRanks ranks(p, s, 30);
    std::vector<double> before(p, 0);
    uint32_t call = 0;
    for (Data d : {Data::kGauss, Data::kLaplace}) {
      for (uint64_t seed = 1; seed <= 2; ++seed) {
        std::vector<std::vector<float>> x(p, std::vector<float>(count));
        std::vector<std::vector<float>> y(p, std::vector<float>(count / p));
        for (int r = 0; r < p; ++r)
          fill(d, seed * 1000 + r, &x[r]);
        ranks.run(++call, x, &y, /*scatter=*/true);
        std::vector<float> whole;
        for (const auto& chunk : y)
          whole.insert(whole.end(), chunk.begin(), chunk.end());
        const double want = true_nmse(x, whole);
        const double est = agreed_estimate(ranks, p, codec, &before);
        SCOPED_TRACE(::testing::Message()
                     << kernels::codec_name(codec) << " data " << int(d) << " seed " << seed
                     << ": true " << want << " estimated " << est);
        EXPECT_GE(est, want / 2);
        EXPECT_LE(est, want * 2);
      }
    }
  }
}

// Runs `calls` q2 calls on one buffer under the bound; returns the codec of every call.
std::vector<std::string> guarded_q2_run(double bound, int calls, double* last_nmse) {
  const int p = 3;
  const size_t count = size_t(1) << 18;
  Settings s;
  s.auto_codec = false;
  s.codec = CodecId::kQ2;
  s.max_nmse = bound;
  EngineRanks ranks(p, s, 30);
  std::vector<std::vector<float>> x(p, std::vector<float>(count)), y = x;
  std::vector<std::string> codecs;
  for (int c = 1; c <= calls; ++c) {
    for (int r = 0; r < p; ++r)
      fill(Data::kGauss, c * 100 + r, &x[r]);
    std::vector<std::map<std::string, uint64_t>> calls_before(p);
    for (int r = 0; r < p; ++r) {
      for (const auto& [name, cs] : ranks.engine(r).stats().by_codec)
        calls_before[r][name] = cs.calls;
    }
    ranks.run(static_cast<uint32_t>(c), x, &y);
    std::vector<std::string> ran(p);
    for (int r = 0; r < p; ++r) {
      for (const auto& [name, cs] : ranks.engine(r).stats().by_codec) {
        if (cs.calls != calls_before[r][name]) ran[r] = name;
      }
      EXPECT_EQ(ran[r], ran[0]) << "call " << c << " rank " << r;
      EXPECT_EQ(y[r], y[0]) << "call " << c << " rank " << r;
    }
    codecs.push_back(ran[0]);
    *last_nmse = true_nmse(x, y[0]);
  }
  return codecs;
}

TEST(AccuracyEngine, MaxNmseStepsQ2UpUntilItHoldsTheSameWayEveryTime) {
  AllowWarnings allow("SKETCHCCL_MAX_NMSE");
  double nmse = 0, nmse2 = 0;
  const std::vector<std::string> a = guarded_q2_run(1e-3, 6, &nmse);
  const std::vector<std::string> b = guarded_q2_run(1e-3, 6, &nmse2);
  EXPECT_EQ(a, b) << "the step-up sequence is deterministic";
  const std::vector<std::string> want = {"q2", "q4", "q8", "q8", "q8", "q8"};
  EXPECT_EQ(a, want);
  EXPECT_LT(nmse, 1e-3) << "the last call is within the bound";
  EXPECT_EQ(allow.count(), 2 * 3 * 2) << "one WARN per step, per rank, per run";
}

TEST(AccuracyEngine, WithoutABoundTheCodecStays) {
  double nmse = 0;
  const std::vector<std::string> a = guarded_q2_run(0, 3, &nmse);
  EXPECT_EQ(a, std::vector<std::string>(3, "q2"));
}

// Rank 0 reduces a second tensor at the address of the first (a reused allocation); the other
// ranks use a fresh buffer. Under `auto` rank 0 has a history for it and the others do not, so
// their codec choices differ: the engine sees it, runs that call exact on every rank, starts the
// buffer afresh everywhere, and the ranks agree again from the next call on. On `algo`'s
// schedule: two-shot has rank 0 (q8) send its decision and contributions speculatively while the
// others (`sparse`, the ring) agree first and drop what rank 0 sent. Returns the WARNs seen (the
// WARN is said once per process).
int address_reused_on_one_rank(Settings::Algo algo) {
  AllowWarnings allow("different histories");
  const int p = 3;
  const size_t count = size_t(1) << 16;
  Settings s;
  s.auto_codec = true;
  s.dense_codec = CodecId::kQ8;
  s.algo = algo;
  EngineRanks ranks(p, s, 30);
  std::vector<std::vector<float>> a(p, std::vector<float>(count)), b = a, y = a;
  for (int r = 0; r < p; ++r) {
    fill(Data::kGauss, 10 + r, &a[r]);
    fill(Data::kGauss, 20 + r, &b[r]);
  }
  std::vector<float*> out;
  std::vector<const float*> in_a, in_b;
  for (int r = 0; r < p; ++r) {
    in_a.push_back(a[r].data());
    in_b.push_back(r == 0 ? a[r].data() : b[r].data());  // rank 0: tensor b at a's address
    out.push_back(y[r].data());
  }
  ranks.run(1, in_a, out, count);
  a[0] = b[0];  // rank 0's second tensor, in the first one's memory
  for (uint32_t call = 2; call <= 3; ++call) {
    ranks.run(call, in_b, out, count);
    std::vector<float> exact(count, 0.0f);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(y[r], y[0]) << "call " << call << " rank " << r;
      EXPECT_EQ(ranks.engine(r).stats().decisions_disagreed, 1u) << "call " << call;
    }
    const double nmse = true_nmse(b, y[0]);
    if (call == 2) {
      EXPECT_LT(nmse, 1e-12) << "the disagreeing call runs exact";
    } else {
      EXPECT_GT(nmse, 0.0) << "agreed again: auto's dense codec (q8)";
      EXPECT_LT(nmse, 1e-3);
    }
  }
  if (algo == Settings::Algo::kTwoShot) {
    EXPECT_EQ(ranks.stats(0, CodecId::kQ8).two_shot_calls, 1u) << "the agreed q8 call";
  }
  return allow.count();
}

TEST(AccuracyEngine, AnAddressReusedOnOneRankRunsExactAndTheRanksAgreeAgain) {
  EXPECT_GE(address_reused_on_one_rank(Settings::Algo::kRing), 1);
}

TEST(AccuracyEngine, AnAddressReusedOnOneRankRunsExactAndTheRanksAgreeAgainOnTwoShot) {
  address_reused_on_one_rank(Settings::Algo::kTwoShot);
}

}  // namespace
}  // namespace sketchccl::coll
