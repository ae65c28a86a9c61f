// The two-shot ReduceScatter carries its accuracy sample (coll/call_sample.h): each rank's input
// values at the sampled positions ride after its contributions, each owner tallies its chunk and
// sends the tally to every rank in one round. The estimate is the side ring's (within float
// rounding) for q8, q4, q2 and casq2 at 2, 3, 4 and 8 ranks, odd counts, sum and avg, in and out
// of place, fp32 and bf16, the same bits on every rank; no message of the side ring's phase; the
// guard steps up alike on every rank under the default policy; a rank absent or killed during
// the tally round, or a short, long or malformed tally, fails the others within the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/codec_common.h"
#include "kernels/convert.h"
#include "src/backend/backend.h"
#include "src/coll/accuracy.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/codec_slice_ops.h"
#include "src/coll/ring_phase.h"
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
using testutil::inputs;
using testutil::on_ranks;
using testutil::RecordedRanks;
using testutil::settings_for;
using testutil::tag_has_phase;
using testutil::unreceived;

bool sampled(const std::vector<uint64_t>& bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

// One ReduceScatter per rank, its inputs rounded to the buffer's type and its output read back.
struct ScatterCall {
  CodecId codec = CodecId::kQ8;
  int p = 2;
  size_t out = 0;  // elements of each rank's output (odd)
  bool avg = false;
  bool in_place = false;
  ElemType type = ElemType::kF32;
};

struct ScatterResult {
  std::vector<std::vector<float>> x;  // each rank's input, as the engine reads it (fp32)
  std::vector<std::vector<float>> y;  // each rank's output (fp32)
  std::vector<CodecStats> stats;
};

constexpr uint32_t kOp = 3;

ScatterResult run_scatter(const ScatterCall& k) {
  const size_t p = static_cast<size_t>(k.p), count = p * k.out, esz = kernels::elem_size(k.type);
  Settings s = settings_for(k.codec, Settings::Algo::kTwoShot);
  s.slice_elems = 2048;  // several slices per chunk, the sample spread over them
  testutil::EngineRanks ranks(k.p, s, 60);
  const auto xf = inputs(k.p, count, static_cast<int>(k.out));
  ScatterResult res;
  std::vector<std::vector<uint8_t>> x(p, std::vector<uint8_t>(count * esz));
  std::vector<std::vector<uint8_t>> y(p, std::vector<uint8_t>(k.out * esz));
  std::vector<const void*> send;
  std::vector<void*> recv;
  for (size_t r = 0; r < p; ++r) {
    kernels::store_f32(xf[r].data(), count, 1.0f, k.type, x[r].data());
    res.x.emplace_back(count);
    kernels::load_f32(x[r].data(), k.type, count, res.x.back().data());
    send.push_back(x[r].data());
    recv.push_back(k.in_place ? x[r].data() + r * k.out * esz : y[r].data());
  }
  ranks.run(kOp, send, recv, count, true, k.type, k.avg);
  for (int r = 0; r < k.p; ++r) {
    res.y.emplace_back(k.out);
    kernels::load_f32(recv[static_cast<size_t>(r)], k.type, k.out, res.y.back().data());
    res.stats.push_back(ranks.stats(r, k.codec));
  }
  return res;
}

// What the side ring (CallSample's, before the sample was carried) estimates for the same call
// from the same sample: each rank's inputs and its decoded values at the samples of its chunk,
// summed exactly in a `none` ring over fresh transports.
AccuracyEstimate side_ring_estimate(const ScatterCall& k, const ScatterResult& res) {
  const size_t p = static_cast<size_t>(k.p), count = p * k.out;
  const Settings s = settings_for(k.codec, Settings::Algo::kTwoShot);
  std::vector<uint64_t> bits;
  sample_bitmap(s.seed, kOp, count, &bits, kScatterSampleStride);
  const size_t m = sample_count(count, kScatterSampleStride);
  std::vector<std::vector<float>> in(p, std::vector<float>(2 * m, 0.0f)), sums = in;
  for (size_t r = 0; r < p; ++r) {
    size_t at = 0;
    for (size_t i = 0; i < count; ++i) {
      if (!sampled(bits, i)) continue;
      in[r][at] = res.x[r][i];
      if (i / k.out == r) in[r][m + at] = res.y[r][i % k.out];
      ++at;
    }
    EXPECT_EQ(at, m);
  }
  auto t = testutil::loopback_transports(k.p, 30);
  std::vector<std::unique_ptr<backend::Backend>> host;
  for (size_t r = 0; r < p; ++r)
    host.push_back(backend::make_host_backend());
  for (const Status& st : on_ranks(k.p, [&](int r) {
         CommLink link = testutil::ring_link(t[r].get(), r, k.p, 30, kOp);
         RingStats rs;
         return exact_sum_ring(link, kPhaseAccuracySample, *host[r], s, in[r].data(),
                               sums[r].data(), 2 * m, &rs);
       })) {
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  std::vector<float> exact(sums[0].begin(), sums[0].begin() + static_cast<std::ptrdiff_t>(m));
  if (k.avg) {
    const float scale = 1.0f / static_cast<float>(k.p);
    for (float& v : exact)
      v *= scale;
  }
  return estimate_accuracy(sums[0].data() + m, exact.data(), m);
}

void expect_carried_is_side_rings(const ScatterCall& k) {
  SCOPED_TRACE(::testing::Message()
               << kernels::codec_name(k.codec) << ", " << k.p << " ranks, " << k.out
               << " per rank, " << (k.avg ? "avg" : "sum") << (k.in_place ? ", in place" : "")
               << (k.type == ElemType::kBf16 ? ", bf16" : ""));
  const ScatterResult res = run_scatter(k);
  const AccuracyEstimate want = side_ring_estimate(k, res);
  ASSERT_GE(want.samples, kMinSamples);
  const CodecStats& cs0 = res.stats[0];
  for (int r = 0; r < k.p; ++r) {
    SCOPED_TRACE(r);
    const CodecStats& cs = res.stats[static_cast<size_t>(r)];
    EXPECT_EQ(cs.two_shot_calls, 1u);
    ASSERT_EQ(cs.estimated_calls, 1u);
    EXPECT_EQ(std::memcmp(&cs.estimated_nmse_sum, &cs0.estimated_nmse_sum, sizeof(double)), 0)
        << cs.estimated_nmse_sum << " against rank 0's " << cs0.estimated_nmse_sum;
    EXPECT_EQ(std::memcmp(&cs.estimated_maxrel_sum, &cs0.estimated_maxrel_sum, sizeof(double)), 0);
  }
  // The exact sums differ only in their fp32 order (rank order against the ring's).
  EXPECT_GT(want.nmse, 0.0);
  EXPECT_NEAR(cs0.estimated_nmse_sum, want.nmse, 1e-4 * want.nmse);
  EXPECT_NEAR(cs0.estimated_maxrel_sum, want.maxrel, 1e-4 * want.maxrel);
}

TEST(TwoShotScatterSample, TheCarriedEstimateIsTheSideRingsWithTheSameBitsOnEveryRank) {
  for (CodecId codec : {CodecId::kQ8, CodecId::kQ4, CodecId::kQ2, CodecId::kCasq2}) {
    for (int p : {2, 3, 4, 8}) {
      ScatterCall k;
      k.codec = codec;
      k.p = p;
      k.out = 6001 + 2 * static_cast<size_t>(p);  // odd: slices of unequal lengths
      expect_carried_is_side_rings(k);
    }
  }
  for (int p : {3, 4}) {
    for (bool avg : {false, true}) {
      for (bool in_place : {false, true}) {
        ScatterCall k;
        k.codec = CodecId::kQ4;
        k.p = p;
        k.out = 12345;
        k.avg = avg;
        k.in_place = in_place;
        expect_carried_is_side_rings(k);
      }
    }
  }
  // The estimate reads the output as it holds it: rounded to bf16.
  ScatterCall k;
  k.p = 4;
  k.out = 9999;
  k.avg = true;
  k.type = ElemType::kBf16;
  expect_carried_is_side_rings(k);
}

// One ReduceScatter of 4 ranks through recording transports: no message of the side ring's phase,
// one tally to every peer, every message received, and the sample's bytes are the carried values
// (4 bytes per sample of the other chunks) and the tallies.
TEST(TwoShotScatterSample, NoSideRingOneTallyToEveryPeer) {
  const int p = 4;
  Settings s = settings_for(CodecId::kQ4, Settings::Algo::kTwoShot);
  s.slice_elems = 4096;
  RecordedRanks ranks(p, s, 30);
  const size_t out = 3 * 65536 + 77, count = p * out;
  const uint32_t op = 5;
  std::vector<std::vector<float>> x = inputs(p, count), y(p, std::vector<float>(out));
  for (const Status& st : ranks.run(op, [&](int r) {
         return call_args(x[r].data(), y[r].data(), count, CallKind::kReduceScatter);
       })) {
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  std::vector<uint64_t> bits;
  sample_bitmap(s.seed, op, count, &bits, kScatterSampleStride);
  std::vector<size_t> per_chunk(p, 0);
  for (size_t i = 0; i < count; ++i)
    per_chunk[i / out] += sampled(bits, i) ? 1 : 0;
  const size_t m = sample_count(count, kScatterSampleStride);
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE(r);
    const CodecStats& cs = ranks.engines[r]->stats().by_codec["q4"];
    EXPECT_EQ(cs.two_shot_calls, 1u);
    EXPECT_EQ(cs.estimated_calls, 1u);
    EXPECT_EQ(cs.sample_bytes_sent,
              4 * (m - per_chunk[static_cast<size_t>(r)]) + (p - 1) * sizeof(SampleTally));
    int tallies = 0;
    for (uint64_t tag : ranks.rec[r]->sent()) {
      EXPECT_FALSE(tag_has_phase(tag, op, kPhaseAccuracySample)) << "a side ring ran";
      tallies += tag_has_phase(tag, op, kPhaseAccuracyTally) ? 1 : 0;
    }
    EXPECT_EQ(tallies, p - 1) << "one tally to every peer";
  }
  EXPECT_EQ(unreceived(ranks.rec), 0) << "a message of the call was never received";
}

// q2 under SKETCHCCL_MAX_NMSE=1e-3 on the default policy (a small ReduceScatter whose codec the
// guard decides: two-shot): q2, q4, q8, q8 on every rank alike, each step from the carried
// estimate, and the last result within the bound.
TEST(TwoShotScatterSample, TheGuardStepsUpAlikeOnEveryRankFromTheCarriedEstimate) {
  AllowWarnings allow("SKETCHCCL_MAX_NMSE");
  const int p = 3;
  Settings s = settings_for(CodecId::kQ2, Settings::Algo::kAuto);
  s.max_nmse = 1e-3;
  RecordedRanks ranks(p, s, 30);
  const size_t out = 30001, count = p * out;  // 352 KiB of fp32 input
  const auto x = inputs(p, count);
  std::vector<std::vector<float>> y(p, std::vector<float>(out));
  const int calls = 4;
  for (int call = 1; call <= calls; ++call) {
    for (const Status& st : ranks.run(static_cast<uint32_t>(call), [&](int r) {
           return call_args(x[r].data(), y[r].data(), count, CallKind::kReduceScatter);
         })) {
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
  }
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE(r);
    CommStats& st = ranks.engines[r]->stats();
    const std::pair<const char*, uint64_t> want[] = {{"q2", 1}, {"q4", 1}, {"q8", 2}};
    for (const auto& [codec, n] : want) {
      const CodecStats& cs = st.by_codec[codec];
      EXPECT_EQ(cs.calls, n) << codec;
      EXPECT_EQ(cs.two_shot_calls, n) << codec;
      EXPECT_EQ(cs.estimated_calls, n) << codec;
      EXPECT_EQ(cs.guard_steps, std::string(codec) == "q8" ? 0u : 1u) << codec;
      const CodecStats& cs0 = ranks.engines[0]->stats().by_codec[codec];
      EXPECT_EQ(std::memcmp(&cs.estimated_nmse_sum, &cs0.estimated_nmse_sum, sizeof(double)), 0)
          << codec;
    }
    EXPECT_EQ(st.decisions_disagreed, 0u);
    EXPECT_LT(testutil::nmse(x, y[r].data(), static_cast<size_t>(r) * out, out), 1e-3);
    for (int call = 1; call <= calls; ++call) {
      for (uint64_t tag : ranks.rec[r]->sent())
        EXPECT_FALSE(tag_has_phase(tag, static_cast<uint32_t>(call), kPhaseAccuracySample));
    }
  }
  EXPECT_EQ(allow.count(), 2 * p) << "one WARN per step, per rank";
  EXPECT_EQ(unreceived(ranks.rec), 0);
}

// One rank's transport in the tally round: absent (its tallies go under a tag no one receives),
// killed (its transport closes as it would send them), or sending a short, long or malformed
// tally. Everything else passes through.
enum class Tamper { kAbsent, kKilled, kShort, kLong, kMalformed };

class TallyTamper final : public testutil::ForwardingTransport {
 public:
  TallyTamper(transport::Transport* inner, Tamper how) : ForwardingTransport(inner), how_(how) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::RequestId* id) override {
    if (!tag_has_phase(tag, kOp, kPhaseAccuracyTally))
      return inner()->isend(peer, tag, buf, bytes, id);
    std::lock_guard<std::mutex> lock(mu_);
    switch (how_) {
      case Tamper::kAbsent:
        return inner()->isend(peer, coll::ring_tag(kOp, 31, 0, 0), buf, bytes, id);
      case Tamper::kKilled:
        inner()->close();
        return Status(Code::kRemoteError, "killed in the tally round");
      case Tamper::kShort:
        return inner()->isend(peer, tag, buf, bytes / 2, id);
      case Tamper::kLong:
      case Tamper::kMalformed: {
        kept_.emplace_back(2 * bytes, 0);
        std::vector<uint8_t>& b = kept_.back();
        std::memcpy(b.data(), buf, bytes);
        if (how_ == Tamper::kLong) return inner()->isend(peer, tag, b.data(), 2 * bytes, id);
        SampleTally t;
        std::memcpy(&t, b.data(), sizeof t);
        t.samples += 1;
        std::memcpy(b.data(), &t, sizeof t);
        return inner()->isend(peer, tag, b.data(), bytes, id);
      }
    }
    return Status(Code::kInternalError, "no such tampering");
  }

 private:
  Tamper how_;
  std::mutex mu_;
  std::list<std::vector<uint8_t>> kept_;  // the tampered messages, alive until the call ends
};

// Rank 2 of 3 tampers with its tallies: the others fail within the timeout, at least one with
// `code` (whose message names the tallies where `named`); a rank that fails closes its transport,
// so the other may see it gone first (ncclRemoteError), as with the data's messages.
void tampered_tally_fails(Tamper how, Code code, bool named) {
  const int p = 3;
  const double timeout = 3;
  RecordedRanks ranks(p, settings_for(CodecId::kQ4, Settings::Algo::kTwoShot), timeout);
  TallyTamper bad(ranks.t[2].get(), how);
  ranks.link_transport[2] = &bad;  // rank 2's messages through the tamperer, not its recorder
  const size_t out = 10001, count = p * out;
  const auto x = inputs(p, count);
  std::vector<std::vector<float>> y(p, std::vector<float>(out));
  const auto t0 = std::chrono::steady_clock::now();
  const auto st = ranks.run(kOp, [&](int r) {
    return call_args(x[r].data(), y[r].data(), count, CallKind::kReduceScatter);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 3 * timeout);
  bool said = false;
  for (int r = 0; r < p - 1; ++r) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(st[r].code() == code || st[r].code() == Code::kRemoteError) << st[r].to_string();
    const bool names = st[r].message().find("tall") != std::string::npos;
    said = said || (st[r].code() == code && (names || !named));
    EXPECT_EQ(ranks.engines[r]->stats().by_codec["q4"].estimated_calls, 0u);
  }
  EXPECT_TRUE(said) << "no rank named the bad tally: " << st[0].to_string() << "; "
                    << st[1].to_string();
}

TEST(TwoShotScatterSample, ARankAbsentFromTheTallyRoundFailsTheOthersWithinTheTimeout) {
  tampered_tally_fails(Tamper::kAbsent, Code::kRemoteError, true);
}

TEST(TwoShotScatterSample, ARankKilledInTheTallyRoundFailsTheOthersWithinTheTimeout) {
  tampered_tally_fails(Tamper::kKilled, Code::kRemoteError, false);
}

TEST(TwoShotScatterSample, AShortLongOrMalformedTallyIsNamed) {
  for (Tamper how : {Tamper::kShort, Tamper::kLong, Tamper::kMalformed}) {
    SCOPED_TRACE(static_cast<int>(how));
    tampered_tally_fails(how, Code::kInvalidUsage, true);
  }
}

// The two-shot ReduceScatter's tally arithmetic: the tallies of the chunks combined in order give
// estimate_accuracy's estimate of the whole sample, within the rounding of the doubles' order.
TEST(TwoShotScatterSample, TalliesCombineToTheWholeSamplesEstimate) {
  std::vector<float> d(1000), e(1000);
  for (size_t i = 0; i < d.size(); ++i) {
    e[i] = std::sin(0.37f * static_cast<float>(i)) * 3;
    d[i] = e[i] + 0.01f * std::cos(1.3f * static_cast<float>(i));
  }
  const AccuracyEstimate whole = estimate_accuracy(d.data(), e.data(), d.size());
  std::vector<SampleTally> parts;
  for (size_t at : {size_t(0), size_t(317), size_t(700)}) {
    const size_t n = at == 700 ? 300 : at == 317 ? 383 : 317;
    parts.push_back(tally_samples(d.data() + at, e.data() + at, n));
  }
  const AccuracyEstimate combined = estimate_of(parts.data(), parts.size());
  EXPECT_EQ(combined.samples, whole.samples);
  EXPECT_NEAR(combined.nmse, whole.nmse, 1e-12 * whole.nmse);
  EXPECT_EQ(combined.maxrel, whole.maxrel);
  // A non-finite decoded value is a huge error, finite.
  d[5] = std::nanf("");
  parts[0] = tally_samples(d.data(), e.data(), 317);
  EXPECT_EQ(estimate_of(parts.data(), parts.size()).nmse, 1e300);
  // An exact sum of zeros at every sample: the error's energy and its largest error themselves.
  const std::vector<float> zeros(4, 0.0f), off = {1, -2, 0, 0};
  const SampleTally z = tally_samples(off.data(), zeros.data(), 4);
  EXPECT_EQ(estimate_of(&z, 1).nmse, 5.0);
  EXPECT_EQ(estimate_of(&z, 1).maxrel, 2.0);
}

}  // namespace
}  // namespace sketchccl::coll
