// sketchccl-scale-model: the scale model of the schedule policy (src/coll/schedule_choice.h),
// the same code `auto` asks, printed for ranks from 2 to 1,024, flat and hierarchical, ring and
// two-shot: predicted time, busbw and NMSE (docs/scale.md). perf/bench/scale_report.py feeds it
// the figures measured here and sets its predictions next to the measured points.
//
//   sketchccl-scale-model --codec q4 [--bytes 25M] [--kind allreduce|reduce_scatter]
//       [--ranks 2,4,...] [--ranks-per-node 8] [--costs ENC,STEP,DEC] (GiB/s of fp32 input, one
//       core; default 0: the wire alone) [--nmse2 X --nmse4 Y] (the ring's flat NMSE at 2 and 4
//       ranks, for the error model) [--link GBPS,LAT_US,MSG_US] (the network link; default a
//       400 Gbit/s NIC) [--intra GBPS,LAT_US,MSG_US] (inside a node; default NVLink)
//       [--cores N] (ranks share N cores: one machine) [--shared CALL_US,ROUND_US,WAIT_US] (on
//       shared cores: per call, per message round, and the wait per round for each rank per core
//       beyond one) [--sampled] (the ring's accuracy sample: its side ring's rounds) [--flat-only]
// Prints CSV: ranks,layout,schedule,seconds,busbw_GBps,nmse.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/coll/schedule_choice.h"

namespace {

using sketchccl::coll::CallKind;
using sketchccl::coll::LinkFigures;
using sketchccl::coll::ModelCall;
using sketchccl::coll::NmseFit;
using sketchccl::coll::Schedule;

[[noreturn]] void die(const char* msg, const char* arg) {
  std::fprintf(stderr, "sketchccl-scale-model: %s%s\n", msg, arg);
  std::exit(2);
}

std::vector<double> numbers(const char* s) {
  std::vector<double> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      char* end = nullptr;
      const double x = std::strtod(cur.c_str(), &end);
      if (cur.empty() || end == nullptr || *end != '\0') die("not a number list: ", s);
      v.push_back(x);
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return v;
}

double bytes_of(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s) die("not a size: ", s);
  if (*end == 'K') v *= 1024;
  if (*end == 'M') v *= 1024.0 * 1024;
  if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return v;
}

LinkFigures link_of(const char* s) {
  const std::vector<double> v = numbers(s);
  if (v.size() != 3 || v[0] <= 0) die("a link is GBPS,LAT_US,MSG_US: ", s);
  return LinkFigures{v[0] * 1e9, v[1] * 1e-6, v[2] * 1e-6};
}

}  // namespace

int main(int argc, char** argv) {
  ModelCall base;
  const char* codec_name = "q8";
  std::vector<double> ranks;
  for (int p = 2; p <= 1024; p *= 2)
    ranks.push_back(p);
  base.bytes = 25.0 * 1024 * 1024;
  int per_node = 8;
  bool flat_only = false;
  double nmse2 = 0, nmse4 = 0;
  std::vector<double> costs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) die("missing value for ", argv[i]);
      return argv[++i];
    };
    if (a == "--codec") {
      codec_name = val();
    } else if (a == "--bytes") {
      base.bytes = bytes_of(val());
    } else if (a == "--kind") {
      const std::string k = val();
      if (k != "allreduce" && k != "reduce_scatter")
        die("--kind: allreduce|reduce_scatter, not ", k.c_str());
      base.kind = k == "allreduce" ? CallKind::kAllReduce : CallKind::kReduceScatter;
    } else if (a == "--ranks") {
      ranks = numbers(val());
    } else if (a == "--ranks-per-node") {
      per_node = static_cast<int>(numbers(val()).at(0));
    } else if (a == "--costs") {
      costs = numbers(val());
      if (costs.size() != 3) die("--costs ENC,STEP,DEC (GiB/s): ", argv[i]);
    } else if (a == "--nmse2") {
      nmse2 = numbers(val()).at(0);
    } else if (a == "--nmse4") {
      nmse4 = numbers(val()).at(0);
    } else if (a == "--link") {
      base.inter = link_of(val());
    } else if (a == "--intra") {
      base.intra = link_of(val());
    } else if (a == "--cores") {
      base.cores = numbers(val()).at(0);
    } else if (a == "--shared") {
      const std::vector<double> v = numbers(val());
      if (v.size() != 3 || v[0] < 0 || v[1] < 0 || v[2] < 0)
        die("--shared CALL_US,ROUND_US,WAIT_US (each >= 0): ", argv[i]);
      base.shared = {v[0] * 1e-6, v[1] * 1e-6, v[2] * 1e-6};
    } else if (a == "--sampled") {
      base.sampled = true;
    } else if (a == "--flat-only") {
      flat_only = true;
    } else {
      die("unknown flag ", argv[i]);
    }
  }
  sketchccl::kernels::CodecId codec{};
  if (!sketchccl::kernels::codec_from_name(codec_name, &codec)) die("no codec ", codec_name);
  base.codec.wire = sketchccl::coll::codec_wire_ratio(codec, 262144);
  if (!costs.empty()) {
    auto per_byte = [](double gibps) { return gibps > 0 ? 1.0 / (gibps * 1073741824.0) : 0.0; };
    base.codec.encode = per_byte(costs[0]);
    base.codec.step = per_byte(costs[1]);
    base.codec.decode = per_byte(costs[2]);
    // A decode and an fp32 add: the decode's cost and a pass over the sum.
    base.codec.decode_add = base.codec.decode + per_byte(10.0);
  }
  const NmseFit fit = sketchccl::coll::fit_nmse(nmse2, nmse4);
  std::printf("# codec %s, wire %.4f, %.0f bytes, eps %.4g gamma %.4f\n", codec_name,
              base.codec.wire, base.bytes, fit.eps, fit.gamma);
  std::printf("ranks,layout,schedule,seconds,busbw_GBps,nmse\n");
  for (double pr : ranks) {
    const int p = static_cast<int>(pr);
    for (int hier = 0; hier < (flat_only ? 1 : 2); ++hier) {
      if (hier && p <= per_node) continue;
      for (Schedule s : {Schedule::kRing, Schedule::kTwoShot}) {
        ModelCall c = base;
        c.nranks = p;
        c.ranks_per_node = hier ? per_node : 1;
        const auto t = sketchccl::coll::predict_time(c, s);
        const double nmse =
            nmse2 > 0 ? sketchccl::coll::predict_nmse(fit, c.kind, s, p, c.ranks_per_node) : 0;
        std::printf("%d,%s,%s,%.6g,%.6g,%.6g\n", p, hier ? "hier" : "flat",
                    sketchccl::coll::schedule_name(s), t.seconds, t.busbw / 1e9, nmse);
      }
    }
  }
  return 0;
}
