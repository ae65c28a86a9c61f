// Codec plans (docs/engine.md): each codec family's way through a taken-over call, as a list of
// stages after UCX's protocols: the phases before the ring, the ring job with the family's slice
// operations (which the call's ring shape runs), the phases after it, and what the call leaves for
// the next one on its buffer. Error feedback (error_feedback.h) and the accuracy estimate
// (call_sample.h) wrap any plan; the engine (reduction_engine.cc) runs them in this order:
//   residual, sample, before, ring (with feedback), after, estimate, record.
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/coll/buffer_states.h"
#include "src/coll/codec_slice_ops.h"
#include "src/coll/coll_shape.h"
#include "src/coll/error_feedback.h"
#include "src/coll/reduction.h"
#include "src/coll/ring.h"
#include "src/coll/settings.h"
#include "src/coll/stats.h"

namespace sketchccl::coll {

// One call as a plan sees it.
struct PlanCall {
  const CommLink& link;
  const ReductionArgs& args;
  const CollShape& shape;
  const Settings& settings;
  kernels::CodecId codec;
  backend::Backend& be;    // where the user's buffers live
  backend::Backend& host;  // host memory: the side rings, `sparse`'s values
  BufferState& state;      // what record() writes for the next call
  // The buffer's state before this call: every decision of the call reads only this (the
  // numbers of the previous call, agreed).
  const BufferState& history;
  CodecStats& cs;
  float scale;                // 1/P for ncclAvg, else 1
  float* residual = nullptr;  // error feedback's residual of the buffer, when it applies
};

class CodecPlan {
 public:
  virtual ~CodecPlan() = default;
  // The residual this plan keeps when SKETCHCCL_ERROR_FEEDBACK is on.
  virtual Feedback feedback(const PlanCall& c) const = 0;
  // Its result is the exact sum (fp32): no accuracy estimate.
  virtual bool exact(const PlanCall& c) const = 0;
  // It reads the input and writes the output only through its ring job's slice operations, each
  // output element once: a staged call's chunks can then arrive and leave as the ring goes
  // (gated_slice_ops.h); else the engine waits for the whole input first.
  virtual bool streams() const { return false; }
  // Before the ring; the input is still intact (an in-place call's ring overwrites it).
  virtual Status before(PlanCall& c) {
    (void)c;
    return Status::Ok();
  }
  // The ring's job; its slice operations live until the plan goes.
  virtual Status ring(PlanCall& c, ShapeJob* job) = 0;
  // The operations error feedback wraps in the job (null: nothing to compensate).
  virtual CodecSliceOps* feedback_target() { return nullptr; }
  // After a successful ring, before the estimate.
  virtual Status after(PlanCall& c) {
    (void)c;
    return Status::Ok();
  }
  // After a successful call: what the next call on the buffer decides from.
  virtual void record(PlanCall& c) = 0;
};

// The plan of a codec's family (kernels/codecs.def).
std::unique_ptr<CodecPlan> make_plan(kernels::CodecFamily family);
// The family's plan reads the buffer's history under these settings (s2's budget, `sparse`'s
// support encoding unless SKETCHCCL_SPARSE_SUPPORT fixes the element bitmap), so the ranks must
// first agree on it.
bool plan_reads_history(kernels::CodecFamily family, const Settings& settings);

}  // namespace sketchccl::coll
