// The accuracy estimate of one call (docs/engine.md, "The accuracy guard"), wrapped around its
// codec plan: this rank's input at a deterministic sample of positions before the ring (an
// in-place call overwrites it), then an exact side ring of those values after it, so that every
// rank computes the same estimate, which goes to the statistics and to the guard.
#pragma once

#include <cstdint>
#include <vector>

#include "src/coll/codec_plan.h"

namespace sketchccl::coll {

class CallSample {
 public:
  // Reads this rank's input at the sample of call `c`.
  Status take(const PlanCall& c);
  bool taken() const { return taken_; }
  // After the plan: the decoded values at the sample against their exact sum; the statistics,
  // an INFO line, and the guard's step up when the estimate exceeds SKETCHCCL_MAX_NMSE.
  Status estimate(PlanCall& c);

 private:
  // The decoded values at the samples of this rank's output, in sample order, into out[0, m)
  // (zero elsewhere).
  Status output_samples(const PlanCall& c, float* out) const;

  bool taken_ = false;
  std::vector<uint64_t> bits_;
  std::vector<float> own_;
};

}  // namespace sketchccl::coll
