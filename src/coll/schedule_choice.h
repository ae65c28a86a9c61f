// The data schedule of a compressed reduction (SKETCHCCL_ALGO, docs/scale.md): the ring, or
// two-shot (two_shot.h), from numbers every rank holds alike (the settings, P, the count, the
// codec, whether the buffers' backend keeps fp32 sums), so every rank picks the same. `auto`
// asks the scale model below, which sketchccl-scale-model (perf/bench) prints and validates.
#pragma once

#include <cstddef>

#include "kernels/codec.h"
#include "src/coll/coll_shape.h"
#include "src/coll/reduction.h"
#include "src/coll/settings.h"

namespace sketchccl::coll {

// ---- the scale model
// One link as a rank sees it: payload bytes per second per direction, the latency of one
// message, and the cost of each message a rank posts and completes (what P - 1 messages of one
// round add up to).
struct LinkFigures {
  double bytes_per_s = 50e9;  // a 400 Gbit/s NIC per GPU
  double latency_s = 5e-6;
  double per_message_s = 1e-6;
};
// NVLink: 450 GB/s per direction.
constexpr LinkFigures kNvlinkFigures{450e9, 2e-6, 0.5e-6};
constexpr LinkFigures kNicFigures{50e9, 5e-6, 1e-6};

// A codec's costs on one rank, seconds per fp32 input byte (1 / throughput), and its packets'
// bytes per fp32 input byte.
struct CodecCosts {
  double wire = 1.0;
  double encode = 0, step = 0, decode = 0;
  double decode_add = 0;  // two-shot's decode into the fp32 sum (a decode and an add)
};
// The codec's packet bytes per fp32 input byte for slices of `slice_elems` (kernels'
// packet_bytes: it follows the codecs).
double codec_wire_ratio(kernels::CodecId codec, size_t slice_elems);

// What ranks sharing cores pay beyond bytes and codec work, measured on the machine
// (perf/bench/scale_report.py): a fixed cost per call (the slices' set-up, the sample), a cost
// per message round, and a wait per round for each rank per core beyond one (a waiting rank's
// peer must first be scheduled); a message's own cost is the link's per_message_s, stretched.
struct SharedCoreCosts {
  double per_call_s = 0;
  double per_round_s = 0;
  double round_wait_s = 0;
};

struct ModelCall {
  CallKind kind = CallKind::kAllReduce;  // kAllReduce or kReduceScatter
  int nranks = 2;
  double bytes = 0;        // the input's fp32 bytes on each rank
  int ranks_per_node = 1;  // > 1: hierarchical (exact inside a node, compressed between)
  LinkFigures intra = kNvlinkFigures;
  LinkFigures inter = kNicFigures;
  CodecCosts codec;
  // The ring's pipeline (SKETCHCCL_SLICE_BYTES of fp32 input, SKETCHCCL_PIPELINE_DEPTH lanes):
  // a chunk of one slice has one lane, whose codec work and transfers take turns; with k lanes a
  // rank's codec work overlaps the others' transfers but for 1/k of it.
  double slice_bytes = 1 << 20;
  int depth = 4;
  // Ranks sharing this many cores (one machine): the link's copies and the codec's work run on
  // the same cores, one after the other, the codec's work stretched by ranks / cores (its figures
  // are one core's, the link's were measured with every rank moving bytes at once); 0: a core
  // (or a GPU) per rank, the codec's work overlapping the link's.
  double cores = 0;
  SharedCoreCosts shared;  // read only where cores > 0
  // The call estimates its accuracy from a sample of positions: the ring reduces their exact
  // values in a side ring of its own; two-shot carries them in its messages, its ReduceScatter
  // with one more round for the owners' tallies.
  bool sampled = false;
};
struct ModelTime {
  double seconds = 0;
  double busbw = 0;  // nccl-tests' bus bandwidth of the call, bytes per second
};
ModelTime predict_time(const ModelCall& call, Schedule schedule);

// The error model: a quantization of a sum of k contributions adds eps * k^(1 - gamma) times one
// contribution's energy (gamma: how much lighter the sum's tails are, so its block maxima fall
// relative to its norm). The ring quantizes the partial sum at every hop, k = 1 .. P; two-shot
// each contribution once and, for an AllReduce, the sum once more.
struct NmseFit {
  double eps = 0;
  double gamma = 0;
};
// eps and gamma from the ring's NMSE at 2 and 4 ranks (flat).
NmseFit fit_nmse(double ring_nmse_2, double ring_nmse_4);
double predict_nmse(const NmseFit& fit, CallKind kind, Schedule schedule, int nranks,
                    int ranks_per_node = 1);

// ---- the policy
// Two-shot can run the codec: a quantizing one (the linear and CASQ families, lossy) on a backend
// with sums. Others always run the ring (exact codecs gain nothing; s2 and `sparse` have plans of
// their own).
bool two_shot_applies(kernels::CodecId codec, bool backend_sums);

// The ring's NMSE at 4 ranks over its NMSE at 2, the mildest growth measured (q4 and q8 on
// Laplace data, docs/scale.md): what `auto` assumes of a codec's error growth.
inline constexpr double kRingNmseGrowth4 = 1.44;

// Up to this many ranks the ring's error feedback settles for codecs of 3 bits or more (and the
// casts), so `auto` does not force two-shot for feedback there (docs/scale.md).
inline constexpr int kRingFeedbackRanks = 4;

// An AllReduce or ReduceScatter of at most this many input bytes (fp32) runs two-shot under
// `auto` at any P, its codec fixed or decided: such calls are latency-bound, and two-shot's one
// round per phase (a decision and the sample carried in its messages) measured as fast as or
// faster than the ring's 2(P - 1) rounds with the side ring and an agreement round (docs/scale.md).
inline constexpr double kSmallCallTwoShotBytes = 1 << 20;

// What `auto` (and a forced schedule) gives for a call of `count` elements among `nranks`: where
// two-shot applies, two-shot for error feedback (but up to kRingFeedbackRanks with 3 bits or
// more) and for a small call (above); else, where the scale
// model does not find the ring more than 5% faster on the default link figures, two-shot when the
// model's ring error is at least twice two-shot's (AllReduce from 8 ranks, ReduceScatter from 5, at
// kRingNmseGrowth4), the ring otherwise. Under `auto` with measured figures the engine asks
// schedule_on_network (network_verdict.h), which may take two-shot where this keeps the ring.
Schedule choose_schedule(const Settings& s, kernels::CodecId codec, int nranks, size_t count,
                         bool backend_sums, CallKind kind = CallKind::kAllReduce);

}  // namespace sketchccl::coll
