#include "interpose/policy.h"

namespace sketchccl::interpose {

PolicyDecision decide(const PolicyInput& in) {
  if (!in.enabled) return {false, "SKETCHCCL_ENABLE=0"};
  switch (in.comm) {
    case CommState::kNone:
      return {false, "communicator has no SketchCCL state"};
    case CommState::kDisagree:
      return {false, "ranks disagree on the configuration"};
    case CommState::kFailed:
      return {false, "SketchCCL join failed"};
    case CommState::kReady:
      break;
  }
  if (in.one_node) return {false, "one node: NCCL's intra-node paths beat any codec"};
  // PreMulSum ops (>= ncclNumOps) and every op but sum and average keep NCCL's arithmetic.
  if (in.op != ncclSum && in.op != ncclAvg) return {false, "op is not sum or avg"};
  size_t elem = 0;
  switch (in.type) {
    case ncclFloat32:
      elem = 4;
      break;
    case ncclFloat16:
    case ncclBfloat16:
      elem = 2;
      break;
    default:
      return {false, "type is not float32, float16 or bfloat16"};
  }
  if (in.count * elem < in.min_bytes) return {false, "smaller than SKETCHCCL_MIN_BYTES"};
  if (in.capturing) return {false, "stream is being captured into a CUDA graph"};
  if (in.mem == backend::MemoryType::kDevice && !in.cuda_backend)
    return {false, "device buffers need the CUDA backend"};
  return {true, ""};
}

}  // namespace sketchccl::interpose
