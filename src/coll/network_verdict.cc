#include "src/coll/network_verdict.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace sketchccl::coll {

using kernels::CodecId;

namespace {

// GB/s of fp32 input from seconds per byte, for the logs.
double gbs(double s_per_byte) {
  return s_per_byte > 0 ? 1e-9 / s_per_byte : 0.0;
}

// The model's call on the agreed figures: what judge and schedule_on_network weigh alike.
ModelCall model_call(const NetworkFigures& f, const Settings& s, const VerdictCall& call) {
  ModelCall m;
  m.kind = call.kind == CallKind::kReduceScatter ? CallKind::kReduceScatter : CallKind::kAllReduce;
  m.nranks = call.nranks;
  m.bytes = 4.0 * static_cast<double>(call.count);
  m.ranks_per_node = call.ranks_per_node;
  m.inter = f.link;
  m.slice_bytes = 4.0 * static_cast<double>(s.slice_elems);
  m.depth = s.depth;
  // Every rank on one machine (its links are the cores' copies), or more ranks than cores on a
  // machine: the copies and the codec's work take turns on the same cores, and the ranks' codec
  // work of one step queues for them: the call's ranks get the busiest machine's share of
  // cores. The link figures were measured with every rank moving bytes at once, the codec's on
  // one core.
  if (f.cores > 0 && (f.machines == 1 || f.ranks_per_machine > f.cores)) {
    m.cores = f.cores * call.nranks / f.ranks_per_machine;
  }
  return m;
}

// A lossy codec's call under `auto` estimates its accuracy from a sample (call_sample.h): the
// ring's side ring, or carried in two-shot's messages.
double codec_seconds(const ModelCall& m, const CodecCosts& costs, Schedule sched,
                     const VerdictCall& call) {
  ModelCall mc = m;
  mc.codec = costs;
  mc.sampled = true;
  // A staged device call copies the input out and the result back, once each.
  const double staging = call.device ? 2 * m.bytes / kDeviceStagingBytesPerS : 0;
  return predict_time(mc, sched).seconds + staging;
}

// The trial's times, the slowest rank's; only where every rank ran it.
void agree_trial(const RankFigures* all, int nranks, NetworkFigures* f) {
  for (int i = 0; i < 2; ++i) {
    f->trial_s[i] = 0;
    for (int r = 0; r < nranks; ++r) {
      if (all[r].trial_s[i] <= 0) {
        f->trial_s[0] = f->trial_s[1] = 0;
        return;
      }
      f->trial_s[i] = std::max(f->trial_s[i], all[r].trial_s[i]);
    }
  }
  f->schedules_tried = true;
}

int candidate_index(const NetworkFigures& f, CodecId codec) {
  for (int k = 0; k < kVerdictCodecs; ++k) {
    if (f.codecs[k] == codec) return k;
  }
  return -1;
}

}  // namespace

void candidate_codecs(const Settings& s, CodecId out[kVerdictCodecs]) {
  CodecId c = s.dense_codec;
  for (int i = 0; i < kVerdictCodecs; ++i) {
    const kernels::CodecInfo* ci = kernels::codec_info(c);
    if (ci == nullptr || !ci->lossy) {
      out[i] = CodecId::kNone;
      continue;
    }
    out[i] = c;
    c = ci->safer;
  }
}

NetworkFigures agree_network(const Settings& s, const RankFigures* all, int nranks) {
  NetworkFigures f;
  if (nranks < 1) return f;
  f.known = true;
  candidate_codecs(s, f.codecs);
  f.link.bytes_per_s = all[0].link_bytes_per_s;
  f.link.latency_s = 0;
  f.link.per_message_s = 0;
  std::map<uint64_t, int> per_machine;
  for (int r = 0; r < nranks; ++r) {
    const RankFigures& m = all[r];
    f.stated = f.stated || m.stated != 0;
    f.link.bytes_per_s = std::min(f.link.bytes_per_s, m.link_bytes_per_s);
    f.link.latency_s = std::max(f.link.latency_s, m.latency_s);
    if (m.nominal_bytes_per_s > 0) {
      f.nominal_bytes_per_s = f.nominal_bytes_per_s > 0
                                  ? std::min(f.nominal_bytes_per_s, m.nominal_bytes_per_s)
                                  : m.nominal_bytes_per_s;
    }
    auto slowest = [](CodecCosts* c, const double* m) {
      c->encode = std::max(c->encode, m[0]);
      c->step = std::max(c->step, m[1]);
      c->decode = std::max(c->decode, m[2]);
      c->decode_add = std::max(c->decode_add, m[3]);
    };
    for (int k = 0; k < kVerdictCodecs; ++k)
      slowest(&f.costs[k], m.codec_costs[k]);
    slowest(&f.exact, m.exact_costs);
    const int on_machine = ++per_machine[m.machine];
    if (on_machine >= f.ranks_per_machine) {
      f.ranks_per_machine = on_machine;
      f.cores = m.cores;
    }
  }
  f.machines = static_cast<int>(per_machine.size());
  // A link that reports its rate cannot carry more: the probe's first bytes may pass a shaper's
  // burst unshaped.
  if (f.nominal_bytes_per_s > 0 && !f.stated) {
    f.link.bytes_per_s = std::min(f.link.bytes_per_s, f.nominal_bytes_per_s);
  }
  for (int k = 0; k < kVerdictCodecs; ++k) {
    f.costs[k].wire = codec_wire_ratio(f.codecs[k], s.slice_elems);
  }
  f.exact.wire = codec_wire_ratio(CodecId::kNone, s.slice_elems);
  agree_trial(all, nranks, &f);
  return f;
}

std::string NetworkFigures::describe() const {
  if (!known) return "not measured";
  char buf[768];
  int n =
      std::snprintf(buf, sizeof buf, "link %.3g Gbit/s, %.3g us (%s)", link.bytes_per_s * 8 / 1e9,
                    link.latency_s * 1e6, stated ? "stated" : "probed");
  if (nominal_bytes_per_s > 0 && n > 0 && static_cast<size_t>(n) < sizeof buf) {
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), ", NIC %.3g Gbit/s",
                       nominal_bytes_per_s * 8 / 1e9);
  }
  for (int k = 0; k < kVerdictCodecs && n > 0 && static_cast<size_t>(n) < sizeof buf; ++k) {
    if (codecs[k] == CodecId::kNone) continue;
    const CodecCosts& c = costs[k];
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                       ", %s encode %.2g step %.2g decode %.2g GB/s",
                       kernels::codec_name(codecs[k]), gbs(c.encode), gbs(c.step), gbs(c.decode));
  }
  if (n > 0 && static_cast<size_t>(n) < sizeof buf) {
    n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                       ", exact encode %.2g step %.2g decode %.2g GB/s, %d rank(s) on %.0f core(s)",
                       gbs(exact.encode), gbs(exact.step), gbs(exact.decode), ranks_per_machine,
                       cores);
  }
  if (schedules_tried && n > 0 && static_cast<size_t>(n) < sizeof buf) {
    std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n),
                  ", trial of %s at %zu MiB: ring %.3g ms, two-shot %.3g ms",
                  kernels::codec_name(codecs[0]), kScheduleTrialElems >> 18, trial_s[0] * 1e3,
                  trial_s[1] * 1e3);
  }
  return buf;
}

Schedule schedule_on_network(const NetworkFigures& f, const Settings& s, CodecId codec,
                             const VerdictCall& call) {
  const Schedule policy =
      choose_schedule(s, codec, call.nranks, call.count, call.backend_sums, call.kind);
  const int k = candidate_index(f, codec);
  if (!f.known || k < 0 || policy != Schedule::kRing || s.algo != Settings::Algo::kAuto ||
      !two_shot_applies(codec, call.backend_sums)) {
    return policy;
  }
  // Measured beats modelled: the trial ran these ranks' flat ring, and from its size up the
  // schedules' costs that the figures do not show grow with the data (docs/scale.md).
  if (f.schedules_tried && call.ranks_per_node <= 1 && call.count >= kScheduleTrialElems) {
    return f.trial_s[1] * kTwoShotMarginTrial < f.trial_s[0] ? Schedule::kTwoShot : Schedule::kRing;
  }
  const ModelCall m = model_call(f, s, call);
  const double ring = codec_seconds(m, f.costs[k], Schedule::kRing, call);
  const double two = codec_seconds(m, f.costs[k], Schedule::kTwoShot, call);
  // Only beyond the model's own error target (docs/scale.md).
  return two * kTwoShotMargin < ring ? Schedule::kTwoShot : Schedule::kRing;
}

bool schedule_trial_applies(const Settings& s, int nranks, bool hierarchical) {
  CodecId c[kVerdictCodecs];
  candidate_codecs(s, c);
  return s.auto_codec && s.algo == Settings::Algo::kAuto && nranks >= 3 && !hierarchical &&
         s.link_gbps <= 0 && c[0] != CodecId::kNone && two_shot_applies(c[0], true) &&
         choose_schedule(s, c[0], nranks, kScheduleTrialElems << 4, true) == Schedule::kRing;
}

Verdict judge(const NetworkFigures& f, const Settings& s, const VerdictCall& call) {
  Verdict v;
  if (!f.known) {  // nothing measured: the dense codec, as a forced one
    CodecId c[kVerdictCodecs];
    candidate_codecs(s, c);
    v.codec = c[0];
    return v;
  }
  ModelCall m = model_call(f, s, call);
  m.codec = call.device || call.nccl_alone ? CodecCosts{f.exact.wire, 0, 0, 0, 0} : f.exact;
  v.exact_s = predict_time(m, Schedule::kRing).seconds;
  v.codec_s = v.exact_s;
  for (int k = 0; k < kVerdictCodecs; ++k) {
    const CodecId c = f.codecs[k];
    if (c == CodecId::kNone) continue;
    const Schedule sched = schedule_on_network(f, s, c, call);
    const double t = codec_seconds(m, f.costs[k], sched, call);
    // Ties go to the more accurate: the exact reduction, then the safer rung.
    if (t < v.codec_s || (v.codec != CodecId::kNone && t <= v.codec_s)) {
      v.codec = c;
      v.schedule = sched;
      v.codec_s = t;
    }
  }
  return v;
}

}  // namespace sketchccl::coll
