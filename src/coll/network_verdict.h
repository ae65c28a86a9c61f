// Whether compression pays on this communicator's links (SKETCHCCL_CODEC=auto, docs/scale.md):
// each rank measures its link and this machine's codec speeds at join (link_probe.h), the ranks
// agree on the slowest figures, and every call of `auto` runs the fastest of the exact reduction
// (NCCL alone, in front of NCCL), the dense codec and its next safer rung (the guard's ladder:
// never less accurate than the dense codec), as the scale model (schedule_choice.h) predicts them.
// The same agreed numbers on every rank, so the same verdict on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/codec.h"
#include "src/coll/reduction.h"
#include "src/coll/schedule_choice.h"
#include "src/coll/settings.h"

namespace sketchccl::coll {

// The codecs weighed beside the exact reduction: the dense codec and its safer rung (q8: q8 and
// bf16; a slot is kNone where the ladder reaches the exact codec first).
inline constexpr int kVerdictCodecs = 2;

// What one rank measured (or was told), as it travels in the agreement: plain numbers only.
struct RankFigures {
  double link_bytes_per_s = 0;     // payload bytes per second per direction of its slowest link
  double latency_s = 0;            // one small message's time across it
  double nominal_bytes_per_s = 0;  // what the transport reports (NIC speed); 0: unknown
  double stated = 0;               // 1: the link figures came from SKETCHCCL_LINK_GBPS
  double cores = 0;                // this machine's cores
  uint64_t machine = 0;            // ranks with the same value share the cores (boot id)
  // Seconds per fp32 input byte of each candidate's encode, step, decode and two-shot's
  // decode-add, in the order candidate_codecs gives; and of the exact ring's (`none`: copy, add).
  double codec_costs[kVerdictCodecs][4] = {};
  double exact_costs[4] = {};
  // Seconds of the schedule trial (link_probe.h: the dense codec's AllReduce of
  // kScheduleTrialElems on the ring, then on two-shot); 0: not run.
  double trial_s[2] = {};
};

// The schedule trial's call: 8 MiB of fp32, past where the schedules cross on a shaped link
// (two-shot's phases ahead of the ring's steps below 4-6 MiB at 1 Gbit/s, behind from there as
// its P - 1 senders share the shaper), about 40 ms at 1 Gbit/s.
inline constexpr size_t kScheduleTrialElems = size_t(2) << 20;

// The candidates of `s` in a fixed order (kNone where a slot is unused): every rank computes them
// from the agreed settings.
void candidate_codecs(const Settings& s, kernels::CodecId out[kVerdictCodecs]);

// What every rank of a communicator holds alike after the agreement.
struct NetworkFigures {
  bool known = false;  // false: nothing measured (a forced codec, one rank): no verdicts
  bool stated = false;
  LinkFigures link;
  double nominal_bytes_per_s = 0;  // the slowest link the transports reported, 0: none did
  kernels::CodecId codecs[kVerdictCodecs] = {};
  CodecCosts costs[kVerdictCodecs];
  CodecCosts exact;  // the exact ring's own work (host memory)
  // Ranks on the busiest machine, and its cores: more ranks than cores share them, so the link's
  // copies and the codec's work do not overlap there (the model's shared-cores case).
  int ranks_per_machine = 1;
  double cores = 0;
  int machines = 1;  // distinct machines: one, and the ring's copies are its cores' work too
  // The schedule trial, the slowest rank's seconds on the ring and on two-shot (0: not run).
  double trial_s[2] = {};
  bool schedules_tried = false;  // every rank ran it
  // One line for logs and sketchccl-info.
  std::string describe() const;
};

// The slowest link, the largest latency and codec costs, the busiest machine: what every rank
// agrees on. `all` holds every rank's figures in rank order.
NetworkFigures agree_network(const Settings& s, const RankFigures* all, int nranks);

// Device buffers: the call is staged (device_staging.h): the whole input crosses PCIe into pinned
// host memory and the result back, once each, and the codecs run on the host as for host
// buffers; NCCL alone moves the data straight to the NIC. PCIe 4.0 x16's pinned copy rate, not
// measured here: no GPU has run the device path yet.
inline constexpr double kDeviceStagingBytesPerS = 20e9;

struct VerdictCall {
  CallKind kind = CallKind::kAllReduce;
  int nranks = 2;
  int ranks_per_node = 1;  // > 1: the hierarchical AllReduce (exact in a node, codec between)
  size_t count = 0;        // elements
  bool backend_sums = true;
  bool device = false;  // device buffers: a codec also pays the staging copies
  // In front of NCCL the exact reduction is NCCL's: the data at the link's rate, its arithmetic
  // on the GPU; standalone it is SketchCCL's exact ring, whose copies and adds the host pays.
  bool nccl_alone = false;
};

struct Verdict {
  kernels::CodecId codec = kernels::CodecId::kNone;  // kNone: the exact reduction is fastest
  Schedule schedule = Schedule::kRing;
  double exact_s = 0;  // the model's seconds of the exact reduction
  double codec_s = 0;  // and of the chosen codec (exact_s when kNone)
};

// The fastest of the exact reduction and the candidates for this call (`auto`'s dense choice).
Verdict judge(const NetworkFigures& f, const Settings& s, const VerdictCall& call);

// How much faster two-shot must be than the ring to take it where the policy keeps the ring: as
// the model predicts it, its accuracy target (predictions within 25% of the measured time); as
// the schedule trial measured it, the trial's own noise.
inline constexpr double kTwoShotMargin = 1.25;
inline constexpr double kTwoShotMarginTrial = 1.1;

// Whether the join runs the schedule trial: auto's codec and schedule, a flat ring of at least
// 3 ranks (at 2 the ring's rounds are two-shot's), links not stated, and a dense codec whose
// schedule the policy leaves to the ring (and so to schedule_on_network).
bool schedule_trial_applies(const Settings& s, int nranks, bool hierarchical);

// The schedule of `codec` for this call on the measured links: choose_schedule's, but where it
// keeps the ring (SKETCHCCL_ALGO=auto, no accuracy rule for two-shot), two-shot where it is faster
// (it is never less accurate than the ring): on a flat ring, for a call at least as large as the
// schedule trial's, where the trial ran two-shot kTwoShotMarginTrial times faster; otherwise
// where the model on these figures predicts it kTwoShotMargin times faster. Agreed figures and
// numbers only: the same on every rank.
Schedule schedule_on_network(const NetworkFigures& f, const Settings& s, kernels::CodecId codec,
                             const VerdictCall& call);

}  // namespace sketchccl::coll
