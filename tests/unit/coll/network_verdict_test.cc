// auto's verdict on the measured network (coll/network_verdict.h): the agreement takes the
// slowest figures whatever the rank order, the candidates follow the guard's ladder, and the
// verdict is the exact reduction where the link outruns the codecs, a codec where it does not.
#include "src/coll/network_verdict.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace sketchccl::coll {
namespace {

using kernels::CodecId;

Settings auto_settings(CodecId dense) {
  Settings s;
  s.auto_codec = true;
  s.dense_codec = dense;
  s.codec = dense;
  return s;
}

// A rank that measured `gbps` and codec work of `gbs` GB/s (every phase), the exact ring's
// copies at `exact_gbs`, on a machine of its own with 8 cores.
RankFigures rank_figures(double gbps, double gbs, double exact_gbs, uint64_t machine) {
  RankFigures r;
  r.link_bytes_per_s = gbps * 1e9 / 8;
  r.latency_s = 5e-6;
  r.cores = 8;
  r.machine = machine;
  for (auto& c : r.codec_costs)
    std::fill(std::begin(c), std::end(c), 1e-9 / gbs);
  std::fill(std::begin(r.exact_costs), std::end(r.exact_costs), 1e-9 / exact_gbs);
  return r;
}

TEST(NetworkVerdict, CandidatesAreTheDenseCodecAndItsSaferRung) {
  CodecId c[kVerdictCodecs];
  candidate_codecs(auto_settings(CodecId::kQ8), c);
  EXPECT_EQ(c[0], CodecId::kQ8);
  EXPECT_EQ(c[1], CodecId::kBf16);
  candidate_codecs(auto_settings(CodecId::kQ4), c);
  EXPECT_EQ(c[0], CodecId::kQ4);
  EXPECT_EQ(c[1], CodecId::kQ8);
  candidate_codecs(auto_settings(CodecId::kBf16), c);
  EXPECT_EQ(c[0], CodecId::kBf16);
  EXPECT_EQ(c[1], CodecId::kNone);
  candidate_codecs(auto_settings(CodecId::kNone), c);
  EXPECT_EQ(c[0], CodecId::kNone);
  EXPECT_EQ(c[1], CodecId::kNone);
}

TEST(NetworkVerdict, RanksAgreeOnTheSlowestFiguresInAnyOrder) {
  const Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all = {rank_figures(100, 10, 20, 1), rank_figures(1, 5, 20, 2),
                                  rank_figures(25, 2, 10, 3), rank_figures(400, 40, 30, 4)};
  all[3].latency_s = 50e-6;
  const NetworkFigures f = agree_network(s, all.data(), 4);
  EXPECT_TRUE(f.known);
  EXPECT_DOUBLE_EQ(f.link.bytes_per_s, 1e9 / 8);
  EXPECT_DOUBLE_EQ(f.link.latency_s, 50e-6);
  EXPECT_DOUBLE_EQ(f.costs[0].encode, 1e-9 / 2);
  EXPECT_DOUBLE_EQ(f.exact.step, 1e-9 / 10);
  EXPECT_EQ(f.ranks_per_machine, 1);
  std::vector<RankFigures> rev(all.rbegin(), all.rend());
  const NetworkFigures g = agree_network(s, rev.data(), 4);
  EXPECT_DOUBLE_EQ(g.link.bytes_per_s, f.link.bytes_per_s);
  EXPECT_DOUBLE_EQ(g.costs[1].decode, f.costs[1].decode);
  // Every call's verdict is a function of the agreed figures alone.
  for (size_t count : {size_t(1) << 18, size_t(1) << 22, size_t(1) << 26}) {
    VerdictCall c;
    c.nranks = 4;
    c.count = count;
    EXPECT_EQ(judge(f, s, c).codec, judge(g, s, c).codec);
  }
}

TEST(NetworkVerdict, ARankReportingItsNicSpeedCapsAProbeThatRanFaster) {
  const Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all = {rank_figures(12, 10, 20, 1), rank_figures(12, 10, 20, 2)};
  all[1].nominal_bytes_per_s = 1e9 / 8;  // a 1 Gbit/s NIC behind a shaper's burst
  EXPECT_DOUBLE_EQ(agree_network(s, all.data(), 2).link.bytes_per_s, 1e9 / 8);
  all[0].stated = 1;  // a stated link is taken as stated
  EXPECT_DOUBLE_EQ(agree_network(s, all.data(), 2).link.bytes_per_s, 12e9 / 8);
}

TEST(NetworkVerdict, RanksSharingCoresAreCountedPerMachine) {
  const Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all(4, rank_figures(1, 10, 20, 7));
  all[0].cores = 2;
  const NetworkFigures f = agree_network(s, all.data(), 4);
  EXPECT_EQ(f.ranks_per_machine, 4);
}

TEST(NetworkVerdict, SlowLinksCompressFastLinksGoToNccl) {
  const Settings s = auto_settings(CodecId::kQ8);
  VerdictCall c;
  c.nranks = 8;
  c.count = size_t(16) << 18;  // 16 MiB
  c.nccl_alone = true;
  auto at = [&](double gbps) {
    std::vector<RankFigures> all(8, rank_figures(gbps, 8, 10, 0));
    for (int r = 0; r < 8; ++r)
      all[static_cast<size_t>(r)].machine = static_cast<uint64_t>(r);
    return agree_network(s, all.data(), 8);
  };
  const Verdict slow = judge(at(1), s, c);
  EXPECT_EQ(slow.codec, CodecId::kQ8);
  EXPECT_LT(slow.codec_s, slow.exact_s / 2);
  // 400 Gbit/s: the host's codec work (8 GB/s) is slower than NCCL's wire.
  const Verdict fast = judge(at(400), s, c);
  EXPECT_EQ(fast.codec, CodecId::kNone);
  EXPECT_DOUBLE_EQ(fast.codec_s, fast.exact_s);
  // Device buffers: a codec also pays the staging copies; 1 Gbit/s still compresses, a
  // 400 Gbit/s link does not.
  c.device = true;
  EXPECT_EQ(judge(at(1), s, c).codec, CodecId::kQ8);
  EXPECT_EQ(judge(at(400), s, c).codec, CodecId::kNone);
}

// Standalone the exact reduction is SketchCCL's own ring, whose copies cost the host too; a
// codec cheaper than those copies (fewer bytes through memory) wins even on a very fast link.
TEST(NetworkVerdict, StandaloneWeighsTheExactRingsOwnWork) {
  const Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all(4, rank_figures(100000, 20, 5, 0));
  for (int r = 0; r < 4; ++r)
    all[static_cast<size_t>(r)].machine = static_cast<uint64_t>(r);
  const NetworkFigures f = agree_network(s, all.data(), 4);
  VerdictCall c;
  c.nranks = 4;
  c.count = size_t(64) << 18;
  EXPECT_NE(judge(f, s, c).codec, CodecId::kNone);
  c.nccl_alone = true;
  EXPECT_EQ(judge(f, s, c).codec, CodecId::kNone);
}

// Between the two: the safer rung wins where its lighter work beats the dense codec's fewer
// bytes, and a tie goes to the more accurate choice.
TEST(NetworkVerdict, TheSaferRungWinsWhereItIsFaster) {
  const Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all(2, rank_figures(100, 1, 20, 0));
  all[1].machine = 1;
  for (RankFigures& r : all)
    std::fill(std::begin(r.codec_costs[1]), std::end(r.codec_costs[1]), 1e-9 / 40);  // bf16
  const NetworkFigures f = agree_network(s, all.data(), 2);
  VerdictCall c;
  c.nranks = 2;
  c.count = size_t(16) << 18;
  c.nccl_alone = true;
  EXPECT_EQ(judge(f, s, c).codec, CodecId::kBf16);
}

// Ranks sharing cores whose steps wait long for their peers (a large measured latency): two-shot's
// two rounds beat the ring's 2(P - 1) and its side ring, so auto runs two-shot where the policy
// alone kept the ring; not where SKETCHCCL_ALGO forces the ring, nor for a codec two-shot cannot
// run, nor on links where the ring is faster; the same verdict from the same figures.
TEST(NetworkVerdict, AutoWeighsTwoShotWhereThePolicyKeepsTheRing) {
  Settings s = auto_settings(CodecId::kQ8);
  std::vector<RankFigures> all(4, rank_figures(4, 10, 5, 7));
  for (RankFigures& r : all) {
    r.cores = 2;
    r.latency_s = 2e-3;
  }
  const NetworkFigures f = agree_network(s, all.data(), 4);
  VerdictCall c;
  c.nranks = 4;
  c.count = size_t(16) << 18;  // 16 MiB: the policy keeps the ring at 4 ranks
  ASSERT_EQ(choose_schedule(s, CodecId::kQ8, 4, c.count, true), Schedule::kRing);
  EXPECT_EQ(schedule_on_network(f, s, CodecId::kQ8, c), Schedule::kTwoShot);
  const Verdict v = judge(f, s, c);
  EXPECT_EQ(v.codec, CodecId::kQ8);
  EXPECT_EQ(v.schedule, Schedule::kTwoShot);
  c.backend_sums = false;  // two-shot does not apply
  EXPECT_EQ(schedule_on_network(f, s, CodecId::kQ8, c), Schedule::kRing);
  c.backend_sums = true;
  s.algo = Settings::Algo::kRing;
  EXPECT_EQ(schedule_on_network(f, s, CodecId::kQ8, c), Schedule::kRing);
  s.algo = Settings::Algo::kAuto;
  // A machine per rank on a fast link with a small latency: the ring's lanes hide its codec work
  // and its steps cost little, two-shot's decode-add is more work: the ring stays.
  std::vector<RankFigures> apart(4, rank_figures(100, 10, 5, 0));
  for (int r = 0; r < 4; ++r) {
    RankFigures& x = apart[static_cast<size_t>(r)];
    x.machine = static_cast<uint64_t>(r);
    x.codec_costs[0][3] = 1e-9 / 2;  // q8's decode-add, slow
  }
  const NetworkFigures g = agree_network(s, apart.data(), 4);
  EXPECT_EQ(schedule_on_network(g, s, CodecId::kQ8, c), Schedule::kRing);
  EXPECT_EQ(schedule_on_network(NetworkFigures{}, s, CodecId::kQ8, c), Schedule::kRing);
}

// The schedule trial (4 ranks sharing 2 cores, a link whose probed latency is small): ranks that
// timed it differently agree on the slowest. From the trial's size up it decides: two-shot where
// it ran more than kTwoShotMarginTrial times faster (a call the probed figures alone keep on the
// ring), the ring where both took about as long (as where a shaper that two-shot's P - 1 senders
// share drops their packets); below it, and where a rank did not run it, the model decides.
TEST(NetworkVerdict, TheScheduleTrialDecidesFromItsSizeUp) {
  const Settings s = auto_settings(CodecId::kQ8);
  VerdictCall c;
  c.nranks = 4;
  c.count = size_t(16) << 18;  // 16 MiB
  VerdictCall small = c;
  small.count = kScheduleTrialElems / 2;
  auto ranks = [](double ring_ms, double two_ms) {
    std::vector<RankFigures> all(4, rank_figures(4, 10, 5, 7));
    for (RankFigures& r : all) {
      r.cores = 2;
      r.latency_s = 50e-6;
      r.trial_s[0] = ring_ms * 1e-3;
      r.trial_s[1] = two_ms * 1e-3;
    }
    return all;
  };
  std::vector<RankFigures> none = ranks(0, 0);
  const NetworkFigures probed = agree_network(s, none.data(), 4);
  EXPECT_FALSE(probed.schedules_tried);
  EXPECT_EQ(schedule_on_network(probed, s, CodecId::kQ8, c), Schedule::kRing);

  std::vector<RankFigures> faster = ranks(30, 12);
  faster[2].trial_s[0] = 40e-3;  // the slowest rank's times count
  faster[1].trial_s[1] = 14e-3;
  const NetworkFigures f = agree_network(s, faster.data(), 4);
  EXPECT_TRUE(f.schedules_tried);
  EXPECT_DOUBLE_EQ(f.trial_s[0], 40e-3);
  EXPECT_DOUBLE_EQ(f.trial_s[1], 14e-3);
  EXPECT_EQ(schedule_on_network(f, s, CodecId::kQ8, c), Schedule::kTwoShot);
  EXPECT_EQ(judge(f, s, c).schedule, Schedule::kTwoShot);
  EXPECT_EQ(schedule_on_network(f, s, CodecId::kQ8, small), Schedule::kRing);
  EXPECT_NE(f.describe().find("trial of q8 at 8 MiB: ring 40 ms, two-shot 14 ms"),
            std::string::npos)
      << f.describe();

  for (double two_ms : {30.0, 28.0}) {  // as long, or faster but within the trial's noise
    std::vector<RankFigures> even = ranks(30, two_ms);
    EXPECT_EQ(schedule_on_network(agree_network(s, even.data(), 4), s, CodecId::kQ8, c),
              Schedule::kRing);
  }

  faster[3].trial_s[1] = 0;  // one rank did not run it
  EXPECT_FALSE(agree_network(s, faster.data(), 4).schedules_tried);
}

// The join runs the trial only where its verdict can matter: auto's codec and schedule, a flat
// ring of 3 ranks or more, links not stated, a dense codec two-shot runs.
TEST(NetworkVerdict, TheScheduleTrialRunsOnlyWhereTheScheduleIsOpen) {
  Settings s = auto_settings(CodecId::kQ8);
  EXPECT_TRUE(schedule_trial_applies(s, 4, false));
  EXPECT_FALSE(schedule_trial_applies(s, 2, false));
  EXPECT_FALSE(schedule_trial_applies(s, 4, true));
  s.algo = Settings::Algo::kTwoShot;
  EXPECT_FALSE(schedule_trial_applies(s, 4, false));
  s.algo = Settings::Algo::kAuto;
  s.link_gbps = 10;
  EXPECT_FALSE(schedule_trial_applies(s, 4, false));
  s.link_gbps = 0;
  s.auto_codec = false;
  EXPECT_FALSE(schedule_trial_applies(s, 4, false));
  EXPECT_FALSE(schedule_trial_applies(auto_settings(CodecId::kNone), 4, false));
}

TEST(NetworkVerdict, NothingMeasuredMeansTheDenseCodec) {
  const Settings s = auto_settings(CodecId::kQ4);
  VerdictCall c;
  c.count = 1 << 20;
  EXPECT_EQ(judge(NetworkFigures{}, s, c).codec, CodecId::kQ4);
}

}  // namespace
}  // namespace sketchccl::coll
