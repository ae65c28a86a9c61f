// CUDA build of the two-shot scheme's fp32 sums (kernels/sum.h, kernels/sum_impl.h): the same
// per-element arithmetic as the CPU build, one element per thread, grid-stride, so a sum, and
// the output stored from it, are the same bits on both.
#include <cuda_runtime.h>

#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/sum_impl.h"

namespace sketchccl::kernels::cuda {

using namespace detail;  // NOLINT: the detail routines' driver

namespace {

constexpr unsigned kMaxSumBlocks = 4096;

unsigned sum_grid(size_t n) {
  const unsigned g = grid_for(n);
  return g < kMaxSumBlocks ? g : kMaxSumBlocks;
}

template <int ET>
__global__ void k_load_sum(const void* x, size_t n, float* sum) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    sum[i] = load_elem<ET>(x, i);
  }
}

__global__ void k_add_sum(const float* v, size_t n, float* sum) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    sum[i] = sum_add(sum[i], v[i]);
  }
}

template <int ET>
__global__ void k_store_sum(const float* sum, size_t n, float scale, void* y) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    store_elem<ET>(y, i, sum[i] * scale);
  }
}

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return errorf(Code::kUnhandledCudaError, "%s kernel launch: %s", what, cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace

Status load_sum(const void* x, ElemType t, size_t n, float* sum, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  return by_type(t, [&](auto et) {
    SCCL_LAUNCH(sum_grid(n), kThreads, 0, stream, k_load_sum<decltype(et)::value>)(x, n, sum);
  });
}

Status add_sum(const float* v, size_t n, float* sum, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SCCL_LAUNCH(sum_grid(n), kThreads, 0, stream, k_add_sum)(v, n, sum);
  return launched("fp32 sum");
}

Status store_sum(const float* sum, size_t n, float scale, ElemType t, void* y,
                 cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  return by_type(t, [&](auto et) {
    SCCL_LAUNCH(sum_grid(n), kThreads, 0, stream, k_store_sum<decltype(et)::value>)
    (sum, n, scale, y);
  });
}

cudaError_t preload_sum_kernels(size_t* max_local_bytes) {
  cudaError_t err = cudaSuccess;
  preload_one(k_load_sum<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_load_sum<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_load_sum<int(ElemType::kBf16)>, max_local_bytes, &err);
  preload_one(k_add_sum, max_local_bytes, &err);
  preload_one(k_store_sum<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_store_sum<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_store_sum<int(ElemType::kBf16)>, max_local_bytes, &err);
  return err;
}

}  // namespace sketchccl::kernels::cuda
