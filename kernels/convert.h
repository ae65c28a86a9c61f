// Host conversions between user element types and fp32, for the engine's own arithmetic
// (error feedback, the sparse phases). Built on the codecs' one element-access code.
#pragma once

#include <cstddef>

#include "kernels/codec.h"

namespace sketchccl::kernels {

// out[i] = float(x[i]) for i < n.
void load_f32(const void* x, ElemType t, size_t n, float* out);
// y[i] = T(v[i] * scale) for i < n, rounding to nearest even.
void store_f32(const float* v, size_t n, float scale, ElemType t, void* y);

}  // namespace sketchccl::kernels
