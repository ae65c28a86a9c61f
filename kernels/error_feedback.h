// Error feedback's arithmetic (docs/engine.md): a slice is compressed as x + residual, and the
// residual keeps what the compression lost. Written once as SCCL_HD routines
// (kernels/error_feedback_impl.h), run by the loops here on the CPU and by the kernels of
// kernels/cuda/codec_cuda.h on the device.
#pragma once

#include <cstddef>

#include "kernels/codec.h"

namespace sketchccl::kernels {

// Sums of squares of one slice, in fp64: of the compensated input and of the residual kept
// (their ratio is the codec's NMSE, the stats' ef_input_sq / ef_residual_sq).
struct EfSums {
  double input_sq = 0;
  double residual_sq = 0;
};

// out[i] = float(x[i]) + residual[i] for i < n.
void ef_compensate(const void* x, ElemType t, size_t n, const float* residual, float* out);

// residual[i] = ((in ? in[i] : 0) + comp[i]) - out[i], 0 where that is not finite (never carry
// NaN/Inf into later calls); *sums = this slice's sums, accumulated in element order.
// `comp` is what was compressed, `in` the decoded incoming partial sum (a step; null for an
// encode), `out` the decoded result.
void ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
               EfSums* sums);

}  // namespace sketchccl::kernels
