// The schedule policy (SKETCHCCL_ALGO, coll/schedule_choice.h) and the scale model it asks: which
// calls take two-shot under `auto`, the settings' spelling, the model's error fit and its time
// terms at scale and on shared cores.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/codec_common.h"
#include "src/coll/schedule_choice.h"
#include "src/coll/settings.h"
#include "src/core/config.h"
#include "tests/unit/coll/two_shot_inputs.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;

using testutil::settings_for;

constexpr CodecId kQuantizing[] = {CodecId::kQ8,    CodecId::kQ4,    CodecId::kQ2,
                                   CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4};

TEST(SchedulePolicy, TwoShotForQuantizingCodecsOnBackendsWithSums) {
  Settings s = settings_for(CodecId::kQ4, Settings::Algo::kAuto);
  for (CodecId c : kQuantizing)
    EXPECT_EQ(choose_schedule(s, c, 8, 1 << 20, true), Schedule::kTwoShot)
        << kernels::codec_name(c);
  EXPECT_EQ(choose_schedule(s, CodecId::kBf16, 16, 1 << 20, true), Schedule::kTwoShot);
  // Where the ring's error is less than twice two-shot's, auto keeps the ring.
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 4, 1 << 20, true), Schedule::kRing);
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 7, 1 << 20, true), Schedule::kRing);
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 4, 1 << 20, true, CallKind::kReduceScatter),
            Schedule::kRing);
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 5, 1 << 20, true, CallKind::kReduceScatter),
            Schedule::kTwoShot);
  // Exact codecs, s2 and `sparse` keep the ring; so does a backend without sums (device memory).
  for (CodecId c : {CodecId::kNone, CodecId::kS2, CodecId::kSparse})
    EXPECT_EQ(choose_schedule(s, c, 8, 1 << 20, true), Schedule::kRing) << kernels::codec_name(c);
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 8, 1 << 20, false), Schedule::kRing);
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 1, 1 << 20, true), Schedule::kRing);
  // A small AllReduce or ReduceScatter takes two-shot at any P, its codec fixed or decided (the
  // guard, `auto`: its decision and its sample carried in the data's messages); above 1 MiB as
  // without.
  for (int which = 0; which < 3; ++which) {
    Settings h = s;
    h.max_nmse = which == 1 ? 0.01 : 0;
    h.auto_codec = which == 2;
    SCOPED_TRACE(which);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ4, 2, 1 << 18, true), Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ8, 4, 1 << 14, true), Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(h, CodecId::kCasq2, 7, 1 << 18, true), Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ8, 4, (1 << 18) + 1, true), Schedule::kRing);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ8, 4, 1 << 14, true, CallKind::kReduceScatter),
              Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ4, 2, 1 << 18, true, CallKind::kReduceScatter),
              Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ8, 4, (1 << 18) + 1, true, CallKind::kReduceScatter),
              Schedule::kRing);
    EXPECT_EQ(choose_schedule(h, CodecId::kSparse, 4, 1 << 14, true, CallKind::kReduceScatter),
              Schedule::kRing);
    EXPECT_EQ(choose_schedule(h, CodecId::kQ8, 4, 1 << 14, false, CallKind::kReduceScatter),
              Schedule::kRing)
        << "no sums";
    EXPECT_EQ(choose_schedule(h, CodecId::kSparse, 4, 1 << 14, true), Schedule::kRing);
    EXPECT_EQ(choose_schedule(h, CodecId::kNone, 4, 1 << 14, true), Schedule::kRing) << "exact";
  }
  // Error feedback takes two-shot wherever it applies from 5 ranks, and for 2-bit codecs at every
  // P; up to 4 ranks a codec of 3 bits or more keeps the ring's rule (the ring for large calls).
  Settings ef = s;
  ef.error_feedback = true;
  for (int p : {2, 4, 5, 7, 16}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(choose_schedule(ef, CodecId::kQ4, p, 1 << 24, true),
              p <= 4 ? Schedule::kRing : Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(ef, CodecId::kCasq3, p, 1 << 24, true),
              p <= 4 ? Schedule::kRing : Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(ef, CodecId::kCasq2, p, 1 << 24, true, CallKind::kReduceScatter),
              Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(ef, CodecId::kQ2, p, 1 << 24, true), Schedule::kTwoShot);
    EXPECT_EQ(choose_schedule(ef, CodecId::kQ4, p, 1 << 14, true), Schedule::kTwoShot) << "small";
  }
  EXPECT_EQ(choose_schedule(ef, CodecId::kSparse, 4, 1 << 14, true), Schedule::kRing);
  EXPECT_EQ(choose_schedule(ef, CodecId::kQ4, 4, 1 << 14, false), Schedule::kRing);
  s.algo = Settings::Algo::kRing;
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 4, 1 << 20, true), Schedule::kRing);
  s.algo = Settings::Algo::kTwoShot;
  EXPECT_EQ(choose_schedule(s, CodecId::kQ4, 4, 1 << 20, true), Schedule::kTwoShot);
  EXPECT_EQ(choose_schedule(s, CodecId::kS2, 4, 1 << 20, true), Schedule::kRing);
}

// The error model's fit recovers the parameters it was made from; its two-shot errors stay flat
// while the ring's grow.
TEST(ScaleModel, TheFitRecoversItsParametersAndTwoShotStaysFlat) {
  const NmseFit made{0.04, 0.3};
  const double n2 = predict_nmse(made, CallKind::kAllReduce, Schedule::kRing, 2);
  const double n4 = predict_nmse(made, CallKind::kAllReduce, Schedule::kRing, 4);
  const NmseFit fit = fit_nmse(n2, n4);
  EXPECT_NEAR(fit.eps, made.eps, 1e-6);
  EXPECT_NEAR(fit.gamma, made.gamma, 1e-6);
  for (CallKind kind : {CallKind::kAllReduce, CallKind::kReduceScatter}) {
    const double two2 = predict_nmse(fit, kind, Schedule::kTwoShot, 2);
    for (int p = 4; p <= 1024; p *= 2) {
      EXPECT_LE(predict_nmse(fit, kind, Schedule::kTwoShot, p), 1.5 * two2) << p;
      EXPECT_GT(predict_nmse(fit, kind, Schedule::kRing, p),
                predict_nmse(fit, kind, Schedule::kRing, p / 2))
          << p;
      if (p >= 16) {
        EXPECT_GT(predict_nmse(fit, kind, Schedule::kRing, p), 2 * two2) << p;
      }
    }
  }
  EXPECT_NEAR(predict_nmse(fit, CallKind::kReduceScatter, Schedule::kTwoShot, 64), fit.eps, 1e-9);
}

// The time model: the same bytes, so two-shot's fewer rounds win at every P; busbw of a large
// call approaches the link's (the ring's) for both; the hierarchy keeps busbw above the flat
// schedule's at 1,024 ranks.
TEST(ScaleModel, TwoShotNeedsFewerRoundsAndTheSameBytes) {
  ModelCall c;
  c.codec.wire = codec_wire_ratio(CodecId::kQ8, 262144);
  c.bytes = 256.0 * 1024 * 1024;
  for (int p = 2; p <= 1024; p *= 2) {
    c.nranks = p;
    const double ring = predict_time(c, Schedule::kRing).seconds;
    const double two = predict_time(c, Schedule::kTwoShot).seconds;
    EXPECT_LE(two, ring) << p;
    if (p <= 16) {
      EXPECT_GT(two, 0.9 * ring) << p;  // bandwidth-bound: the same bytes
    }
  }
  c.bytes = 25.0 * 1024 * 1024;
  c.nranks = 1024;
  const double flat = predict_time(c, Schedule::kTwoShot).busbw;
  c.ranks_per_node = 8;
  EXPECT_GT(predict_time(c, Schedule::kTwoShot).busbw, flat);
  EXPECT_NEAR(codec_wire_ratio(CodecId::kNone, 262144), 1.0, 1e-3);
}

// The at-scale branch (a core or a GPU per rank) is the link's bytes or the codec's work,
// whichever is longer, plus the rounds' latency and messages; the shared-core figures and the
// sample's flag change nothing there unless asked for.
TEST(ScaleModel, AtScaleThePredictionsAreTheLinksAlone) {
  ModelCall c;
  c.codec.wire = codec_wire_ratio(CodecId::kQ8, 262144);
  c.bytes = 25.0 * 1024 * 1024;
  c.nranks = 8;
  const double sent = 2 * 7.0 / 8 * c.bytes * c.codec.wire;
  EXPECT_NEAR(predict_time(c, Schedule::kRing).seconds, sent / 50e9 + 14 * (5e-6 + 1e-6), 1e-12);
  EXPECT_NEAR(predict_time(c, Schedule::kTwoShot).seconds, sent / 50e9 + 2 * 5e-6 + 14 * 1e-6,
              1e-12);
  ModelCall shared = c;
  shared.shared = {1e-3, 1e-4, 1e-3};  // ignored without cores
  for (Schedule s : {Schedule::kRing, Schedule::kTwoShot})
    EXPECT_EQ(predict_time(shared, s).seconds, predict_time(c, s).seconds);
}

// The accuracy sample: the ring's side ring adds 2(P - 1) rounds of one message; two-shot's
// AllReduce carries it in its messages, its ReduceScatter adds one round of P - 1 tallies.
TEST(ScaleModel, TheSampleCostsTheRingASideRingAndTwoShotsReduceScatterOneRound) {
  ModelCall c;
  c.codec.wire = codec_wire_ratio(CodecId::kQ8, 262144);
  c.bytes = 1024.0 * 1024;
  c.nranks = 8;
  for (CallKind kind : {CallKind::kAllReduce, CallKind::kReduceScatter}) {
    SCOPED_TRACE(kind == CallKind::kAllReduce ? "AllReduce" : "ReduceScatter");
    c.kind = kind;
    ModelCall with = c;
    with.sampled = true;
    auto extra = [&](Schedule s) {
      return predict_time(with, s).seconds - predict_time(c, s).seconds;
    };
    EXPECT_NEAR(extra(Schedule::kRing), 14 * (5e-6 + 1e-6), 1e-12);
    EXPECT_NEAR(extra(Schedule::kTwoShot), kind == CallKind::kAllReduce ? 0.0 : 5e-6 + 7 * 1e-6,
                1e-12);
  }
}

// Ranks sharing cores: the fixed cost per call is there in full at the smallest call, and is
// what dominates it; the per-round wait makes the time grow faster than ranks per core.
TEST(ScaleModel, OnSharedCoresTheCallCostAndTheRoundWaitAddUp) {
  ModelCall c;
  c.codec.wire = codec_wire_ratio(CodecId::kQ8, 262144);
  c.codec.encode = c.codec.step = c.codec.decode = 1.0 / 16e9;
  c.inter = LinkFigures{0.5e9, 0, 5e-6};
  c.cores = 2;
  c.sampled = true;
  c.bytes = 64 * 1024;
  c.nranks = 2;
  for (Schedule s : {Schedule::kRing, Schedule::kTwoShot}) {
    const double bare = predict_time(c, s).seconds;
    ModelCall with = c;
    with.shared.per_call_s = 300e-6;
    EXPECT_NEAR(predict_time(with, s).seconds - bare, 300e-6, 1e-12) << schedule_name(s);
    EXPECT_GT(300e-6, bare) << "the call's fixed cost outweighs a small call's bytes";
    with.bytes = 16.0 * 1024 * 1024;
    EXPECT_LT(300e-6, predict_time(with, s).seconds - 300e-6) << "but not a large one's";
  }
  c.bytes = 4.0 * 1024 * 1024;
  c.shared = {200e-6, 10e-6, 100e-6};
  for (Schedule s : {Schedule::kRing, Schedule::kTwoShot}) {
    double last = 0, last_per_rank = 0;
    for (int p = 2; p <= 32; p *= 2) {
      c.nranks = p;
      // The link as a probe measures it with every rank of the machine moving bytes at once.
      c.inter.bytes_per_s = 0.5e9 * 2 / p;
      const double t = predict_time(c, s).seconds;
      EXPECT_GT(t, last) << schedule_name(s) << " " << p;
      if (p > 2) {
        // More than proportional to the ranks per core: the waits compound with the rounds.
        EXPECT_GT(t / (p / 2.0), last_per_rank) << schedule_name(s) << " " << p;
      }
      last = t;
      last_per_rank = t / (p / 2.0);
    }
  }
  // The wait per round only where ranks outnumber the cores.
  c.inter.bytes_per_s = 0.5e9;
  c.nranks = 2;
  ModelCall no_wait = c;
  no_wait.shared.round_wait_s = 0;
  EXPECT_EQ(predict_time(c, Schedule::kRing).seconds,
            predict_time(no_wait, Schedule::kRing).seconds);
  c.nranks = no_wait.nranks = 8;
  EXPECT_NEAR(
      predict_time(c, Schedule::kRing).seconds - predict_time(no_wait, Schedule::kRing).seconds,
      (14 + 14) * 100e-6 * 3, 1e-9);  // data and sample rounds, 3 ranks per core over 1
  EXPECT_NEAR(predict_time(c, Schedule::kTwoShot).seconds -
                  predict_time(no_wait, Schedule::kTwoShot).seconds,
              2 * 100e-6 * 3, 1e-9);  // two phases, the sample carried
}

Config config_with(const char* algo) {
  ConfigSources src;
  src.env["SKETCHCCL_ALGO"] = algo;
  return Config::load(src);
}

TEST(SchedulePolicy, SettingsReadTheAlgorithm) {
  for (const char* v : {"auto", "ring", "twoshot"}) {
    const Config cfg = config_with(v);
    ASSERT_TRUE(cfg.status().ok()) << v;
    Settings s;
    ASSERT_TRUE(Settings::from_config(cfg, &s).ok());
    const Settings::Algo want = std::strcmp(v, "ring") == 0      ? Settings::Algo::kRing
                                : std::strcmp(v, "twoshot") == 0 ? Settings::Algo::kTwoShot
                                                                 : Settings::Algo::kAuto;
    EXPECT_EQ(s.algo, want) << v;
  }
  EXPECT_FALSE(config_with("tree").status().ok());
}

}  // namespace
}  // namespace sketchccl::coll
