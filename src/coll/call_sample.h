// The accuracy estimate of one call (docs/engine.md, "The accuracy guard"), wrapped around its
// codec plan: this rank's input at a deterministic sample of positions before the ring (an
// in-place call overwrites it), then their exact sum, by a side ring after the data or carried in
// the data's own messages (two-shot), so that every rank computes the same estimate, which goes
// to the statistics and to the guard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/accuracy.h"
#include "src/coll/codec_plan.h"

namespace sketchccl::coll {

class CallSample {
 public:
  // Reads this rank's input at the sample of call `c`; `lazily` (a staged call whose input
  // arrives in chunks): only places the sample, whose values fill() reads as the input arrives.
  Status take(const PlanCall& c, bool lazily = false);
  // A lazy sample's values at the sampled positions among elements [offset, offset + n) (the
  // input there is in place); a no-op for a sample taken at once.
  Status fill(size_t offset, size_t n);
  bool taken() const { return taken_; }
  // The sample to carry in the data's own messages (ShapeJob::sample), where the shape can: then
  // estimate() reads the exact sums the call left instead of running the side ring.
  Status carry(SampleCarry** out);
  // After the plan: the decoded values at the sample against their exact sum; the statistics,
  // an INFO line, and the guard's step up when the estimate exceeds SKETCHCCL_MAX_NMSE.
  // `carried`: the data's schedule carried the sample (its exact sums are in place: every
  // position's, or, where each rank decoded only its own chunk, that chunk's, whose tally each
  // owner then sends to every rank in one round).
  Status estimate(PlanCall& c, bool carried = false);

 private:
  // The decoded values at the samples of this rank's output, in sample order, into out[0, m)
  // (zero elsewhere).
  Status output_samples(const PlanCall& c, float* out) const;
  // The sampled positions among elements [begin, end).
  size_t samples_in(size_t begin, size_t end) const;
  // The estimate from the exact sums (carried, or a side ring's).
  Status estimate_by_values(PlanCall& c, bool carried, AccuracyEstimate* e);
  // The estimate from every owner's tally of its chunk (a carried ReduceScatter).
  Status estimate_by_tallies(PlanCall& c, AccuracyEstimate* e);

  bool taken_ = false;
  // A lazy sample's input (fill reads it) and its samples before each 4096 elements.
  bool lazy_ = false;
  backend::Backend* be_ = nullptr;
  const uint8_t* send_ = nullptr;
  kernels::ElemType type_ = kernels::ElemType::kF32;
  size_t count_ = 0;
  std::vector<size_t> before_block_;
  std::vector<uint64_t> range_bits_;  // fill's bits of its range, from bit 0
  std::vector<uint64_t> bits_;
  std::vector<float> own_;
  std::vector<float> exact_;  // the carried sample's exact sums
  SampleCarry carry_;
};

}  // namespace sketchccl::coll
