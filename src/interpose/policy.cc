#include "src/interpose/policy.h"

#include "kernels/codec.h"
#include "src/api/validate.h"

namespace sketchccl::interpose {
namespace {

PolicyDecision forward_because(ForwardReason why, const char* reason) {
  PolicyDecision d;
  d.reason = reason;
  d.why = why;
  return d;
}

}  // namespace

PolicyDecision decide(const PolicyInput& in) {
  using R = ForwardReason;
  if (!in.enabled) return forward_because(R::kDisabled, "SKETCHCCL_ENABLE=0");
  switch (in.comm) {
    case CommState::kNone:
      return forward_because(R::kNotReady, "communicator has no SketchCCL state");
    case CommState::kDisagree:
      return forward_because(R::kNotReady, "ranks disagree on the configuration");
    case CommState::kFailed:
      return forward_because(R::kNotReady, "SketchCCL join failed");
    case CommState::kReady:
      break;
  }
  if (in.one_node) {
    return forward_because(R::kOneNode, "one node: NCCL's intra-node paths beat any codec");
  }
  // The compressed path's rule (api/validate.h): PreMulSum and every op but sum and average,
  // and every type but the three floats, keep NCCL's arithmetic.
  if (!api::compressed_op(in.op)) return forward_because(R::kOp, "op is not sum or avg");
  kernels::ElemType elem;
  if (!api::compressed_type(in.type, &elem)) {
    return forward_because(R::kType, "type is not float32, float16 or bfloat16");
  }
  if (in.count * kernels::elem_size(elem) < in.min_bytes) {
    return forward_because(R::kSize, "smaller than SKETCHCCL_MIN_BYTES");
  }
  if (in.capturing) {
    return forward_because(R::kCapture,
                           "stream is being captured into a CUDA graph (or CUDA could not say)");
  }
  if (in.mem_pending) {
    PolicyDecision d;
    d.needs_memory = true;
    d.reason = "memory not asked yet";
    return d;
  }
  if (!in.mem_known) return forward_because(R::kMemory, "memory cannot be classified");
  if (in.mem == backend::MemoryType::kDevice && !in.cuda_backend) {
    return forward_because(R::kNoBackend, in.cuda_unusable != nullptr && *in.cuda_unusable != '\0'
                                              ? in.cuda_unusable
                                              : "device buffers need CUDA and a device");
  }
  if (in.mem == backend::MemoryType::kDevice ? in.no_gain_device : in.no_gain_host) {
    return forward_because(R::kNoGain, "auto: NCCL alone is predicted faster on these links");
  }
  PolicyDecision d;
  d.take_over = true;
  return d;
}

}  // namespace sketchccl::interpose
