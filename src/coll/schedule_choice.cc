#include "src/coll/schedule_choice.h"

#include <algorithm>
#include <cmath>

namespace sketchccl::coll {
namespace {

double stretch(const ModelCall& c, int ranks) {
  return c.cores > 0 ? std::max(1.0, ranks / c.cores) : 1.0;
}

// One flat reduction among p ranks of `bytes` each. `crossing`: the share of a two-shot rank's
// peers on other nodes (whose bytes take `slow`); the ring moves in lockstep, so its every step
// waits for the slowest link it crosses (`slow` when any rank's neighbour is on another node).
double flat_seconds(const ModelCall& c, CallKind kind, Schedule s, int p, double bytes,
                    const LinkFigures& fast, const LinkFigures& slow, double crossing) {
  if (p < 2) return 0;
  const double n = bytes, w = c.codec.wire, pm1 = p - 1.0, share = pm1 / p;
  const bool all = kind != CallKind::kReduceScatter;
  const double rounds_ring = all ? 2 * pm1 : pm1;
  const double sent = (all ? 2 : 1) * share * n * w;
  const LinkFigures& ring_link = crossing > 0 ? slow : fast;
  // The ring's sample: a side ring of 2(P - 1) rounds of one small message each. Two-shot's
  // AllReduce carries it; its ReduceScatter adds one round of P - 1 tallies.
  const bool side_ring = c.sampled && s == Schedule::kRing;
  const bool tally_round = c.sampled && s == Schedule::kTwoShot && !all;
  const double side_rounds = side_ring ? 2 * pm1 : 0;
  double bw = 0, compute = 0, rounds = 0, messages = 0;
  // The share of the smaller of link and codec time that the other hides (a core per rank).
  double overlap = 1;
  const CodecCosts& k = c.codec;
  const LinkFigures& l = s == Schedule::kRing || crossing <= 0 ? ring_link : slow;
  if (s == Schedule::kRing) {
    // Each lane walks one slice of every chunk through the ring's steps, receive, codec work,
    // send, one after the other; a chunk's slices take turns on min(slices, depth) lanes. On
    // shared cores the steps' latencies (waits for peers to be scheduled) add up once per turn;
    // a core per rank hides a lane's latency behind the other lanes' transfers.
    const double slice = std::max(1.0, c.slice_bytes);
    const int depth = std::max(1, c.depth);
    const double slices = std::max(1.0, std::ceil(n / p / slice));
    const double lanes = std::min(slices, static_cast<double>(depth));
    const double turns = std::ceil(slices / depth);
    bw = sent / ring_link.bytes_per_s;
    rounds = rounds_ring * (c.cores > 0 ? turns : 1) + side_rounds;
    messages = rounds;
    compute = n / p * k.encode + share * n * k.step + (all ? n : n / p) * k.decode;
    overlap = 1 - 1 / lanes;
  } else {
    bw = std::max(sent * crossing / slow.bytes_per_s, sent * (1 - crossing) / fast.bytes_per_s);
    const double phases = (all ? 2 : 1) + (tally_round ? 1 : 0);
    rounds = phases;
    messages = phases * pm1;
    compute = all ? share * n * (k.encode + k.decode_add) + n / p * k.encode + n * k.decode
                  : n * (k.encode + k.decode_add);
  }
  const double lat = rounds * l.latency_s + messages * l.per_message_s;
  if (c.cores <= 0) return bw + compute - overlap * std::min(bw, compute) + lat;
  // Ranks sharing cores (one machine): the "link" is the cores' copies too, so nothing overlaps;
  // every rank's codec work of a step runs at once on the same cores, and every round waits for
  // peers that queue for them.
  const SharedCoreCosts& sh = c.shared;
  const double per_core = p / c.cores;
  const double round_s = sh.per_round_s + sh.round_wait_s * std::max(0.0, per_core - 1);
  return bw + (compute + messages * l.per_message_s) * stretch(c, p) + rounds * l.latency_s +
         sh.per_call_s + rounds * round_s;
}

double bus_factor(CallKind kind, int p) {
  return kind == CallKind::kReduceScatter ? (p - 1.0) / p : 2.0 * (p - 1.0) / p;
}

double mean_pow(int from, int to, double a) {
  double s = 0;
  for (int k = from; k <= to; ++k)
    s += std::pow(static_cast<double>(k), a);
  return s;
}

bool ring_feedback_settles(kernels::CodecId codec, int nranks) {
  const kernels::CodecInfo* ci = kernels::codec_info(codec);
  return nranks <= kRingFeedbackRanks && ci != nullptr && (ci->bits == 0 || ci->bits >= 3);
}

}  // namespace

double codec_wire_ratio(kernels::CodecId codec, size_t slice_elems) {
  kernels::CodecParams p;
  p.codec = codec;
  const size_t n = std::max<size_t>(slice_elems, 64);
  return static_cast<double>(kernels::packet_bytes(p, n)) / (4.0 * static_cast<double>(n));
}

ModelTime predict_time(const ModelCall& c, Schedule s) {
  ModelTime t;
  const int p = c.nranks;
  if (p < 2 || c.bytes <= 0) return t;
  const int L = c.ranks_per_node > 1 ? std::min(c.ranks_per_node, p) : 1;
  const int nodes = (p + L - 1) / L;
  if (L == 1 || nodes == 1) {
    const LinkFigures& l = L == 1 ? c.inter : c.intra;
    t.seconds = flat_seconds(c, c.kind, s, p, c.bytes, l, l, 0);
  } else if (c.kind == CallKind::kReduceScatter) {
    // A ReduceScatter keeps the flat schedule over every rank (docs/hierarchy.md).
    t.seconds = flat_seconds(c, c.kind, s, p, c.bytes, c.intra, c.inter,
                             static_cast<double>(p - L) / (p - 1));
  } else {
    // Exact reduce-scatter in the node (direct, fp32), the compressed rail among the nodes on a
    // shard, the exact all-gather in the node; the node's traffic hides behind the rail's but for
    // the first and last of at least 4 segments.
    const double node = (L - 1.0) / L * c.bytes / c.intra.bytes_per_s + c.intra.latency_s +
                        (L - 1.0) * c.intra.per_message_s;
    ModelCall rail = c;
    rail.ranks_per_node = 1;
    const double rail_s =
        flat_seconds(rail, CallKind::kAllReduce, s, nodes, c.bytes / L, c.inter, c.inter, 0);
    t.seconds = std::max(rail_s, 2 * node) + 2 * node / 4;
  }
  t.busbw = t.seconds > 0 ? c.bytes / t.seconds * bus_factor(c.kind, p) : 0;
  return t;
}

NmseFit fit_nmse(double ring_nmse_2, double ring_nmse_4) {
  NmseFit f;
  if (!(ring_nmse_2 > 0) || !(ring_nmse_4 > 0)) return f;
  const double want = ring_nmse_4 / ring_nmse_2;
  auto ratio = [](double a) { return (mean_pow(1, 4, a) / 4) / (mean_pow(1, 2, a) / 2); };
  double lo = -1, hi = 2;  // a = 1 - gamma; the ratio rises with a
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    (ratio(mid) < want ? lo : hi) = mid;
  }
  const double a = (lo + hi) / 2;
  f.gamma = 1 - a;
  f.eps = ring_nmse_2 * 2 / mean_pow(1, 2, a);
  return f;
}

double predict_nmse(const NmseFit& f, CallKind kind, Schedule s, int p, int ranks_per_node) {
  if (p < 2) return 0;
  const double a = 1 - f.gamma;
  const int L =
      kind == CallKind::kAllReduce && ranks_per_node > 1 ? std::min(ranks_per_node, p) : 1;
  const int n = (p + L - 1) / L;              // the ranks (node sums) the compressed phase reduces
  if (n < 2) return 0;                        // one node: exact
  const double l = L, unit = std::pow(l, a);  // one node sum's quantization, in eps * sigma^2
  double err = 0;
  if (s == Schedule::kRing) {
    err = unit * mean_pow(1, n, a);
  } else if (kind == CallKind::kReduceScatter) {
    err = n * unit;
  } else {
    err = (n - 1) * unit + std::pow(n * l, a);
  }
  return f.eps * err / (n * l);
}

bool two_shot_applies(kernels::CodecId codec, bool backend_sums) {
  const kernels::CodecInfo* ci = kernels::codec_info(codec);
  if (ci == nullptr || !backend_sums || !ci->lossy) return false;
  return ci->family == kernels::CodecFamily::kLinear || ci->family == kernels::CodecFamily::kCasq;
}

Schedule choose_schedule(const Settings& s, kernels::CodecId codec, int nranks, size_t count,
                         bool backend_sums, CallKind kind) {
  if (nranks < 2 || count == 0 || !two_shot_applies(codec, backend_sums)) return Schedule::kRing;
  switch (s.algo) {
    case Settings::Algo::kRing:
      return Schedule::kRing;
    case Settings::Algo::kTwoShot:
      return Schedule::kTwoShot;
    case Settings::Algo::kAuto:
      break;
  }
  // Error feedback on the ring keeps each hop's requantization error of a partial sum and feeds
  // it back: it grows call after call at 16 ranks and is many times two-shot's for 2-bit codecs
  // already at 4 (docs/scale.md), so feedback takes two-shot there. Up to 4 ranks a codec of 3
  // bits or more keeps the ring's rule below, whose DDP steps measured faster there.
  if (s.error_feedback && !ring_feedback_settles(codec, nranks)) return Schedule::kTwoShot;
  if ((kind == CallKind::kAllReduce || kind == CallKind::kReduceScatter) &&
      4.0 * static_cast<double>(count) <= kSmallCallTwoShotBytes) {
    return Schedule::kTwoShot;
  }
  // The same bytes, fewer message rounds; the codec's work is about the same in both, so the
  // model weighs the wire alone, on the default link figures (every rank alike).
  ModelCall c;
  c.kind = kind == CallKind::kReduceScatter ? kind : CallKind::kAllReduce;
  c.nranks = nranks;
  c.bytes = 4.0 * static_cast<double>(count);
  c.codec.wire = codec_wire_ratio(codec, s.slice_elems);
  c.slice_bytes = 4.0 * static_cast<double>(s.slice_elems);
  c.depth = s.depth;
  const double ring = predict_time(c, Schedule::kRing).seconds;
  const double two = predict_time(c, Schedule::kTwoShot).seconds;
  if (two > 1.05 * ring) return Schedule::kRing;
  // Two-shot where the ring's error would be at least twice its own; below that the ring, whose
  // extra error is small there and which degrades less than two-shot's all-to-all on a saturated
  // machine (docs/scale.md).
  const NmseFit growth = fit_nmse(1.0, kRingNmseGrowth4);
  const double ring_err = predict_nmse(growth, c.kind, Schedule::kRing, nranks);
  const double two_err = predict_nmse(growth, c.kind, Schedule::kTwoShot, nranks);
  return ring_err >= 2 * two_err ? Schedule::kTwoShot : Schedule::kRing;
}

}  // namespace sketchccl::coll
