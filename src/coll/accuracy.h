// The accuracy guard (docs/engine.md): every lossy call estimates its own error from a
// deterministic sample of positions whose exact sum travels in a small side reduction, and a
// buffer whose estimate exceeds SKETCHCCL_MAX_NMSE steps up to the next safer codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/codec.h"

namespace sketchccl::coll {

// One sampled position per this many elements, and at least kMinSamples (all of a smaller
// buffer). 2048 keeps the side reduction under 1% of q2's wire bytes (docs/engine.md); each ring
// shape picks its stride (coll_shape.h).
constexpr size_t kSampleStride = 2048;
// Where each rank decodes only its own chunk, the side ring carries two values per sample (input
// and decoded) next to half a ring of packets: four times the share, so a four times sparser
// sample keeps it under 1% too.
constexpr size_t kScatterSampleStride = 4 * kSampleStride;
constexpr size_t kMinSamples = 256;

// Positions sampled in a buffer of `count` elements.
size_t sample_count(size_t count, size_t stride = kSampleStride);

// The sampled positions of call `call` as a bitmap of `count` bits (kernels/sparse.h layout):
// one position drawn in each of sample_count(count, stride) equal strata, from (seed, call)
// only, so every rank draws the same ones.
void sample_bitmap(uint64_t seed, uint32_t call, size_t count, std::vector<uint64_t>* bits,
                   size_t stride = kSampleStride);

// A call's error, from the decoded and the exact values at the sampled positions.
struct AccuracyEstimate {
  size_t samples = 0;
  double nmse = 0;    // sum (decoded - exact)^2 / sum exact^2 (the error's energy if exact is 0)
  double maxrel = 0;  // max |decoded - exact| / max |exact|, as sketchccl-perf measures it
};
AccuracyEstimate estimate_accuracy(const float* decoded, const float* exact, size_t n);

// The sums an estimate is made of, over some of the sampled positions: what the owner of a
// two-shot ReduceScatter's chunk sends every rank about its part of the sample (on the wire, so
// plain doubles: 40 bytes).
struct SampleTally {
  double err = 0;      // sum (decoded - exact)^2
  double ref = 0;      // sum exact^2
  double max_err = 0;  // max |decoded - exact|
  double max_ref = 0;  // max |exact|
  uint64_t samples = 0;
};
static_assert(sizeof(SampleTally) == 40, "the tally's wire size");
SampleTally tally_samples(const float* decoded, const float* exact, size_t n);
// The estimate of `n` tallies combined in their order (estimate_accuracy's definitions): the same
// tallies in the same order give the same bits.
AccuracyEstimate estimate_of(const SampleTally* tallies, size_t n);

// Codecs the estimate applies to: every codec that can change the sum (kernels/codecs.def's
// `lossy`: not none, not sparse).
bool is_lossy(kernels::CodecId c);

// The guard's ladder, kernels/codecs.def's `safer`: q2 -> q4 -> q8 -> bf16 -> none;
// casq2 -> casq3 -> casq4 -> q8; fp16 -> none; s2 -> sparse. An exact codec is its own successor.
kernels::CodecId safer_codec(kernels::CodecId c);
// `c` after `steps` rungs of the ladder.
kernels::CodecId guarded_codec(kernels::CodecId c, int steps);

// The guard's memory of one buffer. It only ever steps up: the estimate at a safer codec says
// nothing about a cheaper one, so a step down would be a guess that could flap.
struct GuardState {
  int steps = 0;  // rungs above the codec the engine chose
};

// After a call that ran `ran` with estimate `nmse`: true (and one more rung) when the bound
// (> 0) is exceeded and a safer codec exists. Pure arithmetic on agreed numbers, so every rank
// takes the same decision.
bool guard_step_up(double max_nmse, kernels::CodecId ran, double nmse, GuardState* state);

}  // namespace sketchccl::coll
