// Launch helpers shared by the CUDA builds of the codecs and of the sparse helpers.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/codec_common.h"
#include "kernels/cuda/kernel_launch.h"

namespace sketchccl::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kWsAlign = 256;

// Blocks for `units` units of work, `per_block` units each (at least one block).
inline unsigned blocks_for(size_t units, size_t per_block) {
  const size_t g = detail::div_up(units, per_block);
  return unsigned(g == 0 ? 1 : (g > 0x7fffffffu ? 0x7fffffffu : g));
}
// Blocks of kThreads for one unit of work per thread.
inline unsigned grid_for(size_t work) {
  return blocks_for(work, kThreads);
}

// Rounds a workspace size up to the workspace alignment.
inline size_t al(size_t b) {
  return (b + kWsAlign - 1) & ~(kWsAlign - 1);
}

// Runs f(std::integral_constant<int, ET>) for the element type, then reports launch errors. The
// runtime keeps the last error of any call, so this also reports a failed cudaMemsetAsync or
// cudaMemcpyAsync of the sequence (their return values are not checked one by one).
template <typename F>
Status by_type(ElemType t, F&& f) {
  if (!detail::for_elem_type(t, f)) {
    return errorf(Code::kInvalidArgument, "codec: unknown element type %d", int(t));
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return errorf(Code::kUnhandledCudaError, "codec kernel launch: %s", cudaGetErrorString(e));
  }
  return Status::Ok();
}

// Loads kernel `k` (cudaFuncGetAttributes forces the module load) and raises *local to its
// per-thread local memory size; keeps the first error in *err.
template <typename K>
void preload_one(K* k, size_t* local, cudaError_t* err) {
  cudaFuncAttributes a;
  const cudaError_t e = cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(k));
  if (e != cudaSuccess) {
    if (*err == cudaSuccess) *err = e;
    return;
  }
  if (a.localSizeBytes > *local) *local = a.localSizeBytes;
}

// acc |= other, word by word; `err` (optional) is the call's device verdict.
__global__ void k_or_words(uint64_t* acc, const uint64_t* other, size_t words, const int* err) {
  if (err && *err) return;
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < words;
       w += size_t(gridDim.x) * blockDim.x) {
    acc[w] |= other[w];
  }
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
