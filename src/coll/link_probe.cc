#include "src/coll/link_probe.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <vector>

#include "src/backend/backend.h"
#include "src/coll/reduction_engine.h"
#include "src/coll/ring_phase.h"
#include "src/coll/topology.h"

namespace sketchccl::coll {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One ring shift of `bytes`: this rank's time until it has sent and received them.
Status shift(const PeerLink& link, int send_to, int recv_from, int step, const uint8_t* out,
             uint8_t* in, size_t bytes, double* seconds) {
  const auto t0 = Clock::now();
  Transfers t(link, "the link probe");
  const uint64_t tag = op_tag(kPhaseLinkProbe, link.op_seq, step);
  SCCL_RETURN_IF_ERROR(t.recv(recv_from, tag, in, bytes));
  SCCL_RETURN_IF_ERROR(t.send(send_to, tag, out, bytes));
  SCCL_RETURN_IF_ERROR(t.wait());
  *seconds = seconds_since(t0);
  return Status::Ok();
}

// This thread's CPU time: what the codec's work costs one core, whether or not the ranks that
// share the cores took turns on it meanwhile (the model stretches it by ranks per core).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds of one core per fp32 byte of `fn` over `bytes`, the faster of two runs.
template <typename Fn>
double per_byte(size_t bytes, Fn fn) {
  double best = 0;
  for (int i = 0; i < 2; ++i) {
    const double t0 = thread_cpu_seconds();
    if (!fn().ok()) return 0;
    const double s = thread_cpu_seconds() - t0;
    best = i == 0 ? s : std::min(best, s);
  }
  return best / static_cast<double>(bytes);
}

}  // namespace

double machine_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return 1;
}

Status measure_link(const PeerLink& link, int send_to, int recv_from, const Settings& s,
                    RankFigures* out) {
  out->machine = machine_id();
  out->cores = machine_cores();
  if (s.link_gbps > 0) {
    out->stated = 1;
    out->link_bytes_per_s = s.link_gbps * 1e9 / 8;
    out->latency_s = s.link_latency_us * 1e-6;
    if (s.link_latency_us > 0) return Status::Ok();
  }
  std::vector<uint8_t> buf_out(kProbeBytes, 0x5a), buf_in(kProbeBytes);
  // Latency: one ring step of a small message with every rank stepping at once, as the ring's
  // steps follow one another: the mean over a chain of one-byte shifts after one that lines the
  // ranks up. Where ranks share cores, a step waits for its peers to be scheduled, and the mean,
  // not the luckiest, is what a chain of steps adds up to.
  double t = 0, chain = 0;
  SCCL_RETURN_IF_ERROR(shift(link, send_to, recv_from, 0, buf_out.data(), buf_in.data(), 1, &t));
  for (int i = 0; i < kLatencyShifts; ++i) {
    SCCL_RETURN_IF_ERROR(
        shift(link, send_to, recv_from, 1 + i, buf_out.data(), buf_in.data(), 1, &t));
    chain += t;
  }
  double lat = chain / kLatencyShifts;
  if (s.link_latency_us > 0) lat = s.link_latency_us * 1e-6;
  out->latency_s = lat;
  if (out->stated != 0) return Status::Ok();
  const int step = 1 + kLatencyShifts;
  SCCL_RETURN_IF_ERROR(
      shift(link, send_to, recv_from, step, buf_out.data(), buf_in.data(), kProbeWarmupBytes, &t));
  double best = 0;
  for (int i = 0; i < kProbeRounds; ++i) {
    SCCL_RETURN_IF_ERROR(shift(link, send_to, recv_from, step + 1 + i, buf_out.data(),
                               buf_in.data(), kProbeBytes, &t));
    best = i == 0 ? t : std::min(best, t);
  }
  // The round's time less one latency is the bytes' time.
  const double bytes_s = std::max(best - lat, best / 2);
  out->link_bytes_per_s = static_cast<double>(kProbeBytes) / bytes_s;
  return Status::Ok();
}

Status time_schedules(const Settings& s, int nranks, const std::function<CommLink()>& next_link,
                      RankFigures* out) {
  kernels::CodecId codecs[kVerdictCodecs];
  candidate_codecs(s, codecs);
  Settings t = s;
  t.auto_codec = false;
  t.codec = codecs[0];
  t.error_feedback = false;
  t.max_nmse = 0;
  t.algo = Settings::Algo::kRing;
  ReductionEngine ring(t, nranks);
  t.algo = Settings::Algo::kTwoShot;
  ReductionEngine two(t, nranks);
  std::vector<float> x(kScheduleTrialElems), y(kScheduleTrialElems);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.f;
  ReductionArgs a;
  a.send = x.data();
  a.recv = y.data();
  a.count = x.size();
  ReductionEngine* engines[2] = {&ring, &two};
  double best[2] = {0, 0};
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 2; ++k) {
      const auto t0 = Clock::now();
      SCCL_RETURN_IF_ERROR(engines[k]->run(next_link(), a));
      const double took = seconds_since(t0);
      if (round > 0) best[k] = round == 1 ? took : std::min(best[k], took);
    }
  }
  out->trial_s[0] = best[0];
  out->trial_s[1] = best[1];
  return Status::Ok();
}

void measure_codecs(const Settings& s, RankFigures* out) {
  // The machine's figures: measured once per process per codec.
  static std::mutex mu;
  static std::vector<std::pair<int, std::array<double, 4>>> known;
  kernels::CodecId codecs[kVerdictCodecs + 1];
  candidate_codecs(s, codecs);
  codecs[kVerdictCodecs] = kernels::CodecId::kNone;  // the exact ring's copy and add
  std::lock_guard<std::mutex> lock(mu);
  auto host = backend::make_host_backend();
  std::vector<float> x, y, sum;
  std::vector<uint8_t> pkt, pkt2;
  for (int k = 0; k <= kVerdictCodecs; ++k) {
    double* c = k < kVerdictCodecs ? out->codec_costs[k] : out->exact_costs;
    if (k < kVerdictCodecs && codecs[k] == kernels::CodecId::kNone) continue;
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const auto& e) { return e.first == int(codecs[k]); });
    if (it != known.end()) {
      std::copy(it->second.begin(), it->second.end(), c);
      continue;
    }
    if (x.empty()) {
      x.resize(kCodecProbeElems);
      y.resize(kCodecProbeElems);
      sum.assign(kCodecProbeElems, 0.f);
      uint64_t r = 0x9e3779b97f4a7c15ull;  // any non-constant data: a quantizer's work is flat
      for (float& v : x) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        v = static_cast<float>(static_cast<int64_t>(r >> 11) % 2001 - 1000) * 1e-3f;
      }
    }
    kernels::CodecParams p;
    p.codec = codecs[k];
    p.seed = s.seed;
    // Slices of the engine's size over a buffer larger than the caches, as a call's data is.
    const size_t n = std::min(s.slice_elems, kCodecProbeElems);
    const size_t slices = kCodecProbeElems / n, cap = host->packet_bytes(p, n);
    pkt.resize(cap * slices);
    pkt2.resize(cap * slices);
    const auto f32 = kernels::ElemType::kF32;
    auto each = [&](auto fn) {
      for (size_t i = 0; i < slices; ++i) {
        Status st = fn(i);
        if (!st.ok()) return st;
      }
      return Status::Ok();
    };
    const size_t bytes = slices * n * sizeof(float);
    c[0] = per_byte(bytes, [&] {
      return each([&](size_t i) {
        return host->encode(p, x.data() + i * n, f32, n, pkt.data() + i * cap, cap);
      });
    });
    p.step = 1;
    c[1] = per_byte(bytes, [&] {
      return each([&](size_t i) {
        return host->step(p, pkt.data() + i * cap, cap, x.data() + i * n, f32, n,
                          pkt2.data() + i * cap, cap);
      });
    });
    c[2] = per_byte(bytes, [&] {
      return each([&](size_t i) {
        return host->decode(p, pkt2.data() + i * cap, cap, y.data() + i * n, f32, n, 1.0f, nullptr);
      });
    });
    c[3] = !host->sums() ? c[2] : per_byte(bytes, [&] {
      return each([&](size_t i) {
        return host->decode_add(p, pkt2.data() + i * cap, cap, sum.data() + i * n, n);
      });
    });
    known.push_back({int(codecs[k]), {c[0], c[1], c[2], c[3]}});
  }
}

}  // namespace sketchccl::coll
