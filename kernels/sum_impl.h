// The per-element arithmetic of kernels/sum.h, SCCL_HD: one source for the CPU and CUDA builds,
// so an fp32 sum is the same bits wherever it is made.
#pragma once

#include "kernels/codec_common.h"

namespace sketchccl::kernels::detail {

// One contribution added to the running sum (contributions are added in rank order).
SCCL_HD_INLINE float sum_add(float sum, float v) {
  return sum + v;
}

}  // namespace sketchccl::kernels::detail
