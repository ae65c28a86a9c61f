// Helpers of the lossless two-phase `sparse` codec (docs/engine.md). The engine runs:
//   phase 1: bitmap_build on the local slice, then an OR-allreduce of the bitmaps
//            (bitmap_or as the reduction), giving the union support on every rank;
//   phase 2: sparse_compact of the local values on the union support into a dense fp32 array
//            of bitmap_popcount(union) values, a `none` (fp32) ring over those arrays, and
//            sparse_scatter of the reduced values back into the user's buffer.
// Bitmaps are arrays of uint64_t words, bit i of word i/64 for element i; bits at and above n in
// the last word are ignored by every reader and left zero by bitmap_build. Exact: the values
// are summed in fp32 like the `none` codec, and NaN/Inf are non-zero, so they travel as values.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec.h"

namespace sketchccl::kernels {

// Bytes of a bitmap for n elements (a multiple of 8).
size_t bitmap_bytes(size_t n);

// bits[bitmap_bytes(n)/8] = (x[i] != 0) for x of type t (NaN counts as non-zero; -0 as zero).
void bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits);

// acc |= other over the words of an n-element bitmap.
void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n);

// Set bits among the first n.
size_t bitmap_popcount(const uint64_t* bits, size_t n);
// Set bits among positions [begin, end): whole words by popcount, the ends bit by bit.
size_t bitmap_count_range(const uint64_t* bits, size_t begin, size_t end);

// out[k] = float(x[i_k]) for the k-th set bit i_k (ascending); out holds bitmap_popcount values.
// Returns the number written.
size_t sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out);

// y[i_k] = vals[k] * scale for the k-th set bit, y[i] = 0 where the bit is clear; y is n
// elements of type t. Returns the number of values read.
size_t sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                      ElemType t);

}  // namespace sketchccl::kernels
