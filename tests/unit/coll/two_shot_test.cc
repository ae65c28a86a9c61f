// The two-shot schedule (coll/two_shot.h), the engine end to end with ranks as threads over
// loopback sockets: every quantizing codec at 2, 4 and 8 ranks gives the same bits on every rank
// with an error that does not grow with the ranks (the ring's does); every element type, sum and
// avg, odd counts, counts below P, in and out of place, AllReduce and ReduceScatter; error
// feedback puts back what each rank quantized; ranks that disagree on the count, or a rank that
// is gone, fail with an error instead of hanging; the decision sent ahead of the data
// (speculative) and what happens when the ranks' decisions differ. The policy and the scale
// model: schedule_choice_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/codec_common.h"
#include "kernels/convert.h"
#include "src/backend/device_runtime.h"
#include "src/coll/accuracy.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/ring_phase.h"
#include "src/coll/schedule_choice.h"
#include "tests/unit/coll/engine_ranks.h"
#include "tests/unit/coll/recording_transport.h"
#include "tests/unit/coll/two_shot_inputs.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::ElemType;
using testutil::AllowWarnings;
using testutil::call_args;
using testutil::data_of;
using testutil::EngineRanks;
using testutil::inputs;
using testutil::nmse;
using testutil::RecordedRanks;
using testutil::settings_for;
using testutil::tag_has_phase;
using testutil::unreceived;

void expect_same_bits(const std::vector<std::vector<float>>& y) {
  for (size_t r = 1; r < y.size(); ++r) {
    EXPECT_EQ(std::memcmp(y[r].data(), y[0].data(), y[0].size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  }
}

struct Outcome {
  double nmse = 0;
  uint64_t two_shot_calls = 0;
  uint64_t bytes_sent = 0;
};

// One AllReduce (or ReduceScatter) of Laplace inputs at P ranks; the NMSE over every rank's
// output, after checking that an AllReduce's ranks hold the same bits.
Outcome reduce_once(CodecId codec, Settings::Algo algo, int p, size_t count, bool scatter,
                    bool in_place = false) {
  EngineRanks ranks(p, settings_for(codec, algo), 60);
  std::vector<std::vector<float>> x = inputs(p, count);
  const size_t out = scatter ? count / static_cast<size_t>(p) : count;
  std::vector<std::vector<float>> y(static_cast<size_t>(p), std::vector<float>(out));
  std::vector<std::vector<float>> buf = x;  // in place: the input's copy is reduced into
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (int r = 0; r < p; ++r) {
    auto& b = buf[static_cast<size_t>(r)];
    send.push_back(in_place ? b.data() : x[static_cast<size_t>(r)].data());
    recv.push_back(in_place ? b.data() + (scatter ? static_cast<size_t>(r) * out : 0)
                            : y[static_cast<size_t>(r)].data());
  }
  ranks.run(1, send, recv, count, scatter);
  Outcome res;
  double err = 0;
  for (int r = 0; r < p; ++r) {
    const float* got = static_cast<const float*>(recv[static_cast<size_t>(r)]);
    if (in_place) std::memcpy(y[static_cast<size_t>(r)].data(), got, out * sizeof(float));
    err += nmse(x, got, scatter ? static_cast<size_t>(r) * out : 0, out);
    res.two_shot_calls += ranks.stats(r, codec).two_shot_calls;
    res.bytes_sent += ranks.stats(r, codec).bytes_sent;
  }
  if (!scatter) expect_same_bits(y);
  res.nmse = err / p;
  return res;
}

constexpr CodecId kQuantizing[] = {CodecId::kQ8,    CodecId::kQ4,    CodecId::kQ2,
                                   CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4};

TEST(TwoShot, EveryQuantizingCodecsErrorDoesNotGrowWithTheRanksAndTheRingsDoes) {
  const size_t count = 20000 + 37;  // odd: chunks and slices of unequal lengths
  for (CodecId codec : kQuantizing) {
    SCOPED_TRACE(kernels::codec_name(codec));
    const Outcome two2 = reduce_once(codec, Settings::Algo::kTwoShot, 2, count, false);
    const Outcome two8 = reduce_once(codec, Settings::Algo::kTwoShot, 8, count, false);
    const Outcome ring8 = reduce_once(codec, Settings::Algo::kRing, 8, count, false);
    EXPECT_EQ(two2.two_shot_calls, 2u);
    EXPECT_EQ(two8.two_shot_calls, 8u);
    EXPECT_EQ(ring8.two_shot_calls, 0u);
    EXPECT_GT(two2.nmse, 0.0);
    EXPECT_LE(two8.nmse, 1.5 * two2.nmse) << "2 ranks " << two2.nmse << ", 8 ranks " << two8.nmse;
    EXPECT_LT(two8.nmse, ring8.nmse) << "two-shot " << two8.nmse << ", ring " << ring8.nmse;
    // The same bytes as the ring, within the packets' headers.
    EXPECT_LE(static_cast<double>(two8.bytes_sent), 1.05 * static_cast<double>(ring8.bytes_sent));
  }
}

TEST(TwoShot, ReduceScatterErrorDoesNotGrowWithTheRanks) {
  for (CodecId codec : {CodecId::kQ4, CodecId::kQ2, CodecId::kCasq2}) {
    SCOPED_TRACE(kernels::codec_name(codec));
    const Outcome two2 = reduce_once(codec, Settings::Algo::kTwoShot, 2, 2 * 8 * 1251, true);
    const Outcome two8 = reduce_once(codec, Settings::Algo::kTwoShot, 8, 2 * 8 * 1251, true);
    const Outcome ring8 = reduce_once(codec, Settings::Algo::kRing, 8, 2 * 8 * 1251, true);
    EXPECT_EQ(two8.two_shot_calls, 8u);
    EXPECT_LE(two8.nmse, 1.5 * two2.nmse) << "2 ranks " << two2.nmse << ", 8 ranks " << two8.nmse;
    EXPECT_LT(two8.nmse, ring8.nmse);
  }
}

TEST(TwoShot, InPlaceAndOutOfPlaceAgree) {
  for (bool scatter : {false, true}) {
    SCOPED_TRACE(scatter ? "ReduceScatter" : "AllReduce");
    for (int p : {2, 4}) {
      const size_t count = static_cast<size_t>(p) * 3001;
      const Outcome out = reduce_once(CodecId::kQ4, Settings::Algo::kTwoShot, p, count, scatter);
      const Outcome in =
          reduce_once(CodecId::kQ4, Settings::Algo::kTwoShot, p, count, scatter, true);
      EXPECT_EQ(in.two_shot_calls, static_cast<uint64_t>(p));
      // The packets depend only on the inputs: the same result either way.
      EXPECT_DOUBLE_EQ(in.nmse, out.nmse);
    }
  }
}

TEST(TwoShot, SmallAndOddCountsWork) {
  for (int p : {2, 3, 4}) {
    for (size_t count : {size_t(1), size_t(2), size_t(63), size_t(65), size_t(1000)}) {
      SCOPED_TRACE(::testing::Message() << p << " ranks, count " << count);
      const Outcome ar = reduce_once(CodecId::kQ8, Settings::Algo::kTwoShot, p, count, false);
      EXPECT_LT(ar.nmse, 1e-3);
      const size_t rs_count = count * static_cast<size_t>(p);
      const Outcome rs = reduce_once(CodecId::kQ8, Settings::Algo::kTwoShot, p, rs_count, true);
      EXPECT_LT(rs.nmse, 1e-3);
    }
  }
}

// Every element type, sum and avg, against the exact reduction of the same (rounded) inputs.
TEST(TwoShot, EveryTypeAndOp) {
  const int p = 4;
  const size_t count = 4 * 2503;
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBf16}) {
    for (bool avg : {false, true}) {
      for (bool scatter : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "type " << int(t) << (avg ? " avg" : " sum")
                                          << (scatter ? " ReduceScatter" : " AllReduce"));
        EngineRanks ranks(p, settings_for(CodecId::kQ8, Settings::Algo::kTwoShot), 60);
        const auto xf = inputs(p, count);
        const size_t esz = kernels::elem_size(t);
        const size_t out = scatter ? count / p : count;
        std::vector<std::vector<uint8_t>> x(p, std::vector<uint8_t>(count * esz));
        std::vector<std::vector<uint8_t>> y(p, std::vector<uint8_t>(out * esz));
        std::vector<std::vector<float>> xr(p, std::vector<float>(count));
        std::vector<const void*> send;
        std::vector<void*> recv;
        for (int r = 0; r < p; ++r) {
          kernels::store_f32(xf[r].data(), count, 1.0f, t, x[r].data());
          kernels::load_f32(x[r].data(), t, count, xr[r].data());
          send.push_back(x[r].data());
          recv.push_back(y[r].data());
        }
        ranks.run(1, send, recv, count, scatter, t, avg);
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(ranks.stats(r, CodecId::kQ8).two_shot_calls, 1u);
          std::vector<float> got(out);
          kernels::load_f32(y[r].data(), t, out, got.data());
          EXPECT_LT(nmse(xr, got.data(), scatter ? r * out : 0, out, avg ? 1.0 / p : 1.0), 2e-3);
          if (!scatter && r > 0) {
            EXPECT_EQ(std::memcmp(y[r].data(), y[0].data(), out * esz), 0);
          }
        }
      }
    }
  }
}

// The same buffer reduced T times from the same inputs: with error feedback each rank puts back
// what it quantized (and the owner its requantization of the sum), so the mean of the results
// converges to the exact sum; without, the error of the mean only falls as the rounding's noise.
TEST(TwoShot, ErrorFeedbackPutsBackWhatEachRankQuantized) {
  const int p = 4, calls = 16;
  const size_t count = 4 * 4001;
  for (bool scatter : {false, true}) {
    SCOPED_TRACE(scatter ? "ReduceScatter" : "AllReduce");
    double err_of_mean[2] = {0, 0};
    for (bool feedback : {false, true}) {
      EngineRanks ranks(p, settings_for(CodecId::kQ2, Settings::Algo::kTwoShot, feedback), 60);
      const auto x = inputs(p, count);
      const size_t out = scatter ? count / p : count;
      std::vector<std::vector<float>> y(p, std::vector<float>(out));
      std::vector<std::vector<double>> mean(p, std::vector<double>(out, 0.0));
      for (int call = 0; call < calls; ++call) {
        ranks.run(static_cast<uint32_t>(call + 1), x, &y, scatter);
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < out; ++i)
            mean[r][i] += y[r][i] / calls;
        }
      }
      std::vector<float> m(out);
      for (int r = 0; r < p; ++r) {
        for (size_t i = 0; i < out; ++i)
          m[i] = static_cast<float>(mean[r][i]);
        err_of_mean[feedback ? 1 : 0] += nmse(x, m.data(), scatter ? r * out : 0, out) / p;
        EXPECT_EQ(ranks.stats(r, CodecId::kQ2).two_shot_calls, static_cast<uint64_t>(calls));
      }
    }
    EXPECT_LT(err_of_mean[1], 0.25 * err_of_mean[0])
        << "with feedback " << err_of_mean[1] << ", without " << err_of_mean[0];
  }
}

// Rank r's input of call `call`: a signal shared by every rank (a gradient's mean) plus this
// rank's own noise, Laplace, correlation `rho` between ranks.
std::vector<std::vector<float>> shared_inputs(int p, size_t count, int call, double rho) {
  std::mt19937_64 gs(99991u * static_cast<unsigned>(call) + 5);
  std::exponential_distribution<float> e(1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> common(count);
  for (float& v : common)
    v = sign(gs) ? e(gs) : -e(gs);
  auto x = inputs(p, count, call);
  for (auto& xr : x) {
    for (size_t i = 0; i < count; ++i)
      xr[i] = static_cast<float>(std::sqrt(rho) * common[i] + std::sqrt(1 - rho) * xr[i]);
  }
  return x;
}

// CASQ under error feedback (nearest levels) on correlated inputs, averaged, a fresh input every
// call as in training: the owner's residual of its requantized sum is put back exactly once and
// at the right scale, so the error of the running sum of results stays small, and the error per
// call does not grow over the calls (it would if a residual fed on itself).
TEST(TwoShot, ErrorFeedbackOnCasqAveragedKeepsTheRunningSumAndIsBounded) {
  const int p = 8, calls = 10;
  const size_t count = static_cast<size_t>(p) * 4096;
  double running[2] = {0, 0}, last[2] = {0, 0};
  for (bool feedback : {false, true}) {
    EngineRanks ranks(p, settings_for(CodecId::kCasq2, Settings::Algo::kTwoShot, feedback), 60);
    std::vector<std::vector<float>> y(p, std::vector<float>(count));
    // One input buffer per rank for every call, as a training step's bucket: the residual is kept
    // per buffer address.
    std::vector<std::vector<float>> x(p, std::vector<float>(count));
    std::vector<double> sum_y(count, 0.0), sum_x(count, 0.0);
    for (int call = 0; call < calls; ++call) {
      const auto fresh = shared_inputs(p, count, call, 0.5);
      for (int r = 0; r < p; ++r)
        std::copy(fresh[r].begin(), fresh[r].end(), x[r].begin());
      const auto xs = data_of(std::as_const(x));
      const auto ys = data_of(y);
      ranks.run(static_cast<uint32_t>(call + 1), std::vector<const void*>(xs.begin(), xs.end()),
                std::vector<void*>(ys.begin(), ys.end()), count, false, ElemType::kF32, true);
      expect_same_bits(y);
      last[feedback ? 1 : 0] = nmse(x, y[0].data(), 0, count, 1.0 / p);
      double err = 0, ref = 0;
      for (size_t i = 0; i < count; ++i) {
        double s = 0;
        for (const auto& xr : x)
          s += xr[i];
        sum_x[i] += s / p;
        sum_y[i] += y[0][i];
        err += (sum_y[i] - sum_x[i]) * (sum_y[i] - sum_x[i]);
        ref += sum_x[i] * sum_x[i];
      }
      running[feedback ? 1 : 0] = err / ref;
    }
    EXPECT_EQ(ranks.stats(0, CodecId::kCasq2).two_shot_calls, static_cast<uint64_t>(calls));
  }
  EXPECT_LT(running[1], 0.15 * running[0])
      << "running sum's error with feedback " << running[1] << ", without " << running[0];
  EXPECT_LT(last[1], 1.5 * last[0])
      << "last call's error with feedback " << last[1] << ", without " << last[0];
}

TEST(TwoShot, RanksThatDisagreeOnTheCountFailInsteadOfHanging) {
  const int p = 3;
  const double timeout = 20;
  RecordedRanks ranks(p, settings_for(CodecId::kQ4, Settings::Algo::kTwoShot), timeout);
  const size_t count = 30000;
  std::vector<std::vector<float>> x(p, std::vector<float>(count + 640, 1.0f)), y = x;
  const auto t0 = std::chrono::steady_clock::now();
  const auto st = ranks.run(
      1, [&](int r) { return call_args(x[r].data(), y[r].data(), r == 0 ? count + 640 : count); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, timeout / 2) << "the mismatch was not noticed before the timeout";
  bool named = false;
  for (int r = 0; r < p; ++r) {
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
    if (st[r].code() == Code::kInvalidUsage) {
      named = true;
      EXPECT_NE(st[r].message().find("disagree"), std::string::npos) << st[r].to_string();
    }
  }
  EXPECT_TRUE(named) << "no rank named the mismatch";
}

TEST(TwoShot, AGoneRankFailsTheOthersWithinTheTimeout) {
  const int p = 4;
  const double timeout = 3;
  RecordedRanks ranks(p, settings_for(CodecId::kQ4, Settings::Algo::kTwoShot), timeout);
  const size_t count = 30000;
  std::vector<std::vector<float>> x(p, std::vector<float>(count, 1.0f)), y = x;
  ranks.t[3]->close();  // rank 3 is gone
  const auto t0 = std::chrono::steady_clock::now();
  const auto st =
      ranks.run_on(p - 1, 1, [&](int r) { return call_args(x[r].data(), y[r].data(), count); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3 * timeout);
  for (int r = 0; r < p - 1; ++r) {
    EXPECT_EQ(st[r].code(), Code::kRemoteError) << "rank " << r << ": " << st[r].to_string();
  }
}

// Where the tags of `sent` fall: the index of the last send of phase `phase` among slices
// [0, slices) of call `op`, or of the first (`first`); -1 if none.
long send_index(const std::vector<uint64_t>& sent, uint32_t op, uint8_t phase, int slices,
                bool first) {
  long at = -1;
  for (size_t i = 0; i < sent.size(); ++i) {
    for (int j = 0; j < slices; ++j) {
      if (sent[i] != ring_tag(op, phase, 0, j)) continue;
      if (first && at < 0) at = static_cast<long>(i);
      if (!first) at = static_cast<long>(i);
    }
  }
  return at;
}

// How many sends of `sent` are of phase `phase`, slices [0, slices) of call `op`.
int count_sends(const std::vector<uint64_t>& sent, uint32_t op, uint8_t phase, int slices) {
  int n = 0;
  for (uint64_t tag : sent) {
    for (int j = 0; j < slices; ++j)
      n += tag == ring_tag(op, phase, 0, j) ? 1 : 0;
  }
  return n;
}

// The owner reduces a slice and sends its packet as soon as the slice's contributions are in,
// while it still encodes and sends its own later contributions: the links carry both phases at
// once (on a slow network, a reduce-scatter followed by an all-gather takes both phases' time
// end to end). Rank 1 posts every contribution before rank 0 starts, so rank 0 has its first
// slices' contributions after its first encodes.
TEST(TwoShot, ReducedPacketsGoOutWhileTheContributionsStillFlow) {
  const int p = 2, slices = 32;
  Settings s = settings_for(CodecId::kQ8, Settings::Algo::kTwoShot);
  s.slice_elems = 1024;
  RecordedRanks ranks(p, s, 30);
  const size_t count = static_cast<size_t>(p) * slices * s.slice_elems;
  std::vector<std::vector<float>> x = inputs(p, count), y = x;
  auto args = [&](int r) { return call_args(x[r].data(), y[r].data(), count); };
  // A first call connects the ranks (rank 1 accepts rank 0's connection as it progresses).
  for (const Status& st : ranks.run(1, args))
    ASSERT_TRUE(st.ok()) << st.to_string();
  Status st1;
  std::thread one([&] { st1 = ranks.call(1, 2, args(1)); });
  const auto t0 = std::chrono::steady_clock::now();
  while (count_sends(ranks.rec[1]->sent(), 2, kPhaseTwoShotScatter, slices) < slices) {
    ASSERT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
        << "rank 1 did not post its contributions";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const Status st0 = ranks.call(0, 2, args(0));
  one.join();
  ASSERT_TRUE(st0.ok()) << st0.to_string();
  ASSERT_TRUE(st1.ok()) << st1.to_string();
  const std::vector<uint64_t> sent = ranks.rec[0]->sent();
  const long last_contribution = send_index(sent, 2, kPhaseTwoShotScatter, slices, false);
  const long first_reduced = send_index(sent, 2, kPhaseTwoShotGather, slices, true);
  ASSERT_GE(last_contribution, 0);
  ASSERT_GE(first_reduced, 0);
  EXPECT_LT(first_reduced, last_contribution)
      << "rank 0 sent its first reduced packet only after all its contributions";
  expect_same_bits(y);
}

// The buffers of one call per rank: an AllReduce's output apart, a ReduceScatter's (rank r's chunk
// r of the input's count) in place or apart, and the call's arguments.
struct CallBuffers {
  CallBuffers(std::vector<std::vector<float>> in, bool scatter, bool in_place)
      : x(std::move(in)), scatter(scatter), in_place(in_place) {
    const size_t p = x.size(), count = x[0].size();
    out = scatter ? count / p : count;
    buf = x;
    y.assign(p, std::vector<float>(out));
  }
  ReductionArgs args(int r) {
    auto& b = buf[static_cast<size_t>(r)];
    return call_args(in_place ? b.data() : x[static_cast<size_t>(r)].data(),
                     in_place ? b.data() + (scatter ? static_cast<size_t>(r) * out : 0)
                              : y[static_cast<size_t>(r)].data(),
                     x[0].size(), scatter ? CallKind::kReduceScatter : CallKind::kAllReduce);
  }
  // Rank r's output after the call; in place, the input is restored for the next call.
  std::vector<float> output(int r) {
    auto& b = buf[static_cast<size_t>(r)];
    if (!in_place) return y[static_cast<size_t>(r)];
    const float* at = b.data() + (scatter ? static_cast<size_t>(r) * out : 0);
    std::vector<float> o(at, at + out);
    b = x[static_cast<size_t>(r)];
    return o;
  }
  size_t first(int r) const { return scatter ? static_cast<size_t>(r) * out : 0; }
  std::vector<std::vector<float>> x, buf, y;
  size_t out = 0;
  bool scatter, in_place;
};

// Under the guard (the codec decided from each rank's history) a two-shot call is one message
// round per phase: a rank sends its decision and its contributions without waiting for the
// others' decisions. Rank 1 runs its call alone first and gets its contributions out before
// rank 0 has started; agreeing on the decision first would hold them until rank 0's arrives.
void decision_rides_ahead(bool scatter, bool in_place) {
  const int p = 2, slices = 4;
  Settings s = settings_for(CodecId::kQ8, Settings::Algo::kTwoShot);
  s.max_nmse = 1000;  // the guard, never stepping
  s.slice_elems = 1024;
  RecordedRanks ranks(p, s, 30);
  const size_t count = static_cast<size_t>(p) * slices * s.slice_elems;
  CallBuffers io(inputs(p, count), scatter, in_place);
  const uint8_t phase = scatter ? kPhaseTwoShotScatterRs : kPhaseTwoShotScatter;
  for (const Status& st : ranks.run(1, [&](int r) { return io.args(r); }))
    ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < p; ++r)
    io.output(r);  // in place: the input back for call 2
  Status st1;
  std::thread one([&] { st1 = ranks.call(1, 2, io.args(1)); });
  const auto t0 = std::chrono::steady_clock::now();
  bool ahead = false;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0) {
    if (count_sends(ranks.rec[1]->sent(), 2, phase, slices) == slices) {
      ahead = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const Status st0 = ranks.call(0, 2, io.args(0));
  one.join();
  EXPECT_TRUE(ahead) << "rank 1 waited for rank 0 before sending its contributions";
  ASSERT_TRUE(st0.ok()) << st0.to_string();
  ASSERT_TRUE(st1.ok()) << st1.to_string();
  std::vector<std::vector<float>> second;
  for (int r = 0; r < p; ++r) {
    second.push_back(io.output(r));
    const double err = nmse(io.x, second.back().data(), io.first(r), io.out);
    EXPECT_GT(err, 0.0) << "rank " << r << ": lossy";
    EXPECT_LT(err, 1e-3) << "rank " << r;
  }
  if (!scatter) expect_same_bits(second);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(ranks.engines[r]->stats().decisions_disagreed, 0u);
    EXPECT_EQ(ranks.engines[r]->stats().by_codec["q8"].two_shot_calls, 2u);
    EXPECT_EQ(count_sends(ranks.rec[r]->sent(), 2, kPhaseDecision, 1), 1)
        << "one decision per peer";
  }
}

TEST(TwoShot, TheGuardsDecisionRidesAheadOfTheContributions) {
  decision_rides_ahead(false, false);
}

TEST(TwoShot, AReduceScattersDecisionRidesAheadOfItsContributions) {
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "apart");
    decision_rides_ahead(true, in_place);
  }
}

// Rank 0 reduces a second tensor at the address of the first, the others a fresh buffer, under
// `s` (two-shot): their decisions differ. Every rank drops what it received, runs the call exact
// and starts the buffer afresh; the next calls agree again (lossy, `agreed` on two-shot: the
// `two_shot` calls of the four), and no message of any call is left unreceived in a transport.
// `scatter`: a ReduceScatter (each rank's chunk), in place or apart.
void reused_address_runs_exact(const Settings& s, CodecId agreed, uint64_t two_shot,
                               bool scatter = false, bool in_place = false) {
  AllowWarnings allow("different histories");
  const int p = 3;
  const size_t count = 40002;
  RecordedRanks ranks(p, s, 30);
  std::vector<std::vector<float>> b = inputs(p, count, 2);
  CallBuffers fresh(inputs(p, count, 1), scatter, in_place), reused(b, scatter, in_place);
  std::vector<std::vector<float>> y(p);
  auto run = [&](uint32_t op, bool reuse) {
    // Rank 0 keeps the first call's address (fresh's buffers) for tensor b.
    for (const Status& st :
         ranks.run(op, [&](int r) { return (reuse && r != 0 ? reused : fresh).args(r); })) {
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    for (int r = 0; r < p; ++r)
      y[static_cast<size_t>(r)] = (reuse && r != 0 ? reused : fresh).output(r);
  };
  run(1, false);
  fresh.x[0] = b[0];  // rank 0: tensor b at the first tensor's address
  fresh.buf[0] = b[0];
  for (uint32_t call = 2; call <= 4; ++call) {
    SCOPED_TRACE(call);
    run(call, true);
    if (!scatter) expect_same_bits(y);
    for (int r = 0; r < p; ++r) {
      const double err = nmse(b, y[static_cast<size_t>(r)].data(), reused.first(r), reused.out);
      if (call == 2) {
        EXPECT_LT(err, 1e-12) << "the disagreeing call runs exact, rank " << r;
      } else {
        EXPECT_GT(err, 0.0) << "agreed again: lossy, rank " << r;
        EXPECT_LT(err, 1e-3) << "rank " << r;
      }
      EXPECT_EQ(ranks.engines[r]->stats().decisions_disagreed, 1u) << "rank " << r;
    }
  }
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(ranks.engines[r]->stats().by_codec[kernels::codec_name(agreed)].two_shot_calls,
              two_shot)
        << "rank " << r;
    EXPECT_EQ(ranks.engines[r]->stats().by_codec["none"].calls, 1u) << "call 2, rank " << r;
  }
  EXPECT_EQ(unreceived(ranks.rec), 0) << "a message of a call was never received";
}

// Every rank speculates: rank 0 holds an error feedback residual for the address, the others not.
TEST(TwoShot, SpeculativeDecisionsThatDifferRunTheCallExactOnEveryRank) {
  reused_address_runs_exact(settings_for(CodecId::kQ8, Settings::Algo::kTwoShot, true),
                            CodecId::kQ8, 3);
}

TEST(TwoShot, SpeculativeReduceScatterDecisionsThatDifferRunItExactOnEveryRank) {
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "apart");
    reused_address_runs_exact(settings_for(CodecId::kQ8, Settings::Algo::kTwoShot, true),
                              CodecId::kQ8, 3, true, in_place);
  }
}

// Rank 0 speculates (`auto` chose q8 from its history), the others agree first (`sparse` on the
// ring, the first call's choice) and drop what rank 0 sent.
Settings auto_q8() {
  Settings s = settings_for(CodecId::kQ8, Settings::Algo::kTwoShot);
  s.auto_codec = true;
  s.dense_codec = CodecId::kQ8;
  return s;
}

TEST(TwoShot, ARankThatSpeculatesAloneHasItsContributionsDropped) {
  reused_address_runs_exact(auto_q8(), CodecId::kQ8, 2);
}

TEST(TwoShot, AReduceScatterRankThatSpeculatesAloneHasItsContributionsDropped) {
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "apart");
    // A ReduceScatter's fresh history runs `sparse` first (call 3), then q8 (call 4).
    reused_address_runs_exact(auto_q8(), CodecId::kQ8, 1, true, in_place);
  }
}

// A killed rank during a speculative call: the others fail with the ring's error, in time.
void gone_rank_fails_speculative_call(bool scatter) {
  const int p = 3;
  const double timeout = 3;
  Settings s = settings_for(CodecId::kQ4, Settings::Algo::kTwoShot);
  s.max_nmse = 1000;
  RecordedRanks ranks(p, s, timeout);
  const size_t count = 30000;
  CallBuffers io(std::vector<std::vector<float>>(p, std::vector<float>(count, 1.0f)), scatter,
                 false);
  ranks.t[2]->close();
  const auto t0 = std::chrono::steady_clock::now();
  const auto st = ranks.run_on(p - 1, 1, [&](int r) { return io.args(r); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3 * timeout);
  for (int r = 0; r < p - 1; ++r)
    EXPECT_EQ(st[r].code(), Code::kRemoteError) << "rank " << r << ": " << st[r].to_string();
}

TEST(TwoShot, AGoneRankFailsASpeculativeCallWithinTheTimeout) {
  gone_rank_fails_speculative_call(false);
}

TEST(TwoShot, AGoneRankFailsASpeculativeReduceScatterWithinTheTimeout) {
  gone_rank_fails_speculative_call(true);
}

// The accuracy sample rides in the two-shot messages: no side ring, the same estimate on every
// rank (the same bits), and it is the side ring's quantity: the error of the decoded result at the
// sampled positions against the exact sum of the inputs there.
TEST(TwoShot, TheSampleRidesInTheMessagesWithTheSameEstimateOnEveryRank) {
  const int p = 4;
  Settings s = settings_for(CodecId::kQ4, Settings::Algo::kTwoShot);
  s.slice_elems = 4096;  // several slices per chunk, the sample spread over them
  RecordedRanks ranks(p, s, 30);
  const size_t count = 3 * 65536 + 77;
  const uint32_t op = 5;
  std::vector<std::vector<float>> x = inputs(p, count), y = x;
  for (const Status& st :
       ranks.run(op, [&](int r) { return call_args(x[r].data(), y[r].data(), count); })) {
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  expect_same_bits(y);
  std::vector<uint64_t> bits;
  sample_bitmap(s.seed, op, count, &bits);
  std::vector<float> decoded, exact;
  for (size_t i = 0; i < count; ++i) {
    if (((bits[i / 64] >> (i % 64)) & 1u) == 0) continue;
    double e = 0;
    for (int r = 0; r < p; ++r)
      e += x[r][i];
    exact.push_back(static_cast<float>(e));
    decoded.push_back(y[0][i]);
  }
  ASSERT_GE(exact.size(), kMinSamples);
  const double want = estimate_accuracy(decoded.data(), exact.data(), exact.size()).nmse;
  const CodecStats& cs0 = ranks.engines[0]->stats().by_codec["q4"];
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE(r);
    const CodecStats& cs = ranks.engines[r]->stats().by_codec["q4"];
    EXPECT_EQ(cs.two_shot_calls, 1u);
    ASSERT_EQ(cs.estimated_calls, 1u);
    EXPECT_EQ(std::memcmp(&cs.estimated_nmse_sum, &cs0.estimated_nmse_sum, sizeof(double)), 0)
        << cs.estimated_nmse_sum << " against rank 0's " << cs0.estimated_nmse_sum;
    EXPECT_NEAR(cs.estimated_nmse_sum, want, 1e-4 * want);
    // Its bytes are counted as the sample's: 4 per sampled value in each message.
    EXPECT_GT(cs.sample_bytes_sent, 0u);
    for (uint64_t tag : ranks.rec[r]->sent())
      EXPECT_FALSE(tag_has_phase(tag, op, kPhaseAccuracySample)) << "a side ring ran";
  }
}

}  // namespace
}  // namespace sketchccl::coll
