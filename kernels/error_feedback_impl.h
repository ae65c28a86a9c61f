// Error feedback's per-element arithmetic, SCCL_HD: the CPU build (kernels/host/error_feedback.cc)
// and the CUDA build (kernels/cuda/error_feedback.cu) both call these, so a device residual is
// bit for bit the host's.
#pragma once

#include "kernels/codec_common.h"

namespace sketchccl::kernels::detail {

// Element i of x (type ET) plus its residual: what the codec compresses.
template <int ET>
SCCL_HD_INLINE float ef_compensated(const void* x, size_t i, const float* residual) {
  return load_elem<ET>(x, i) + residual[i];
}

// What the compression lost of in + comp, given its decoded result out; 0 when not finite.
SCCL_HD_INLINE float ef_residual(float in, float comp, float out) {
  const float e = (in + comp) - out;
  return is_finite(e) ? e : 0.0f;
}

}  // namespace sketchccl::kernels::detail
