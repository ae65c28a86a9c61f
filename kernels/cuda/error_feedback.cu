// CUDA build of error feedback's arithmetic (kernels/error_feedback_impl.h): one element per
// thread, grid-stride; the sums of squares are reduced per block and added with fp64 atomics
// (so their order, not their terms, differs from the CPU build's).
#include <cuda_runtime.h>

#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/error_feedback_impl.h"

namespace sketchccl::kernels::cuda {

using namespace detail;  // NOLINT: the detail routines' driver

namespace {

constexpr unsigned kMaxEfBlocks = 1024;  // bounds the atomics of the sums

unsigned ef_grid(size_t n) {
  const unsigned g = grid_for(n);
  return g < kMaxEfBlocks ? g : kMaxEfBlocks;
}

template <int ET>
__global__ void k_ef_compensate(const void* x, size_t n, const float* residual, float* out) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    out[i] = ef_compensated<ET>(x, i, residual);
  }
}

// Adds the block's totals of a and b to sums[0] and sums[1] (one atomic each per block).
__device__ void block_add_to(double a, double b, double* sums) {
  __shared__ double part[2][kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    part[0][warp] = a;
    part[1][warp] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ta = 0, tb = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) {
      ta += part[0][w];
      tb += part[1][w];
    }
    atomicAdd(&sums[0], ta);
    atomicAdd(&sums[1], tb);
  }
}

__global__ void k_ef_update(const float* comp, const float* in, const float* out, size_t n,
                            float* residual, double* sums) {
  double a = 0, b = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float c = comp[i];
    const float e = ef_residual(in != nullptr ? in[i] : 0.0f, c, out[i]);
    residual[i] = e;
    a += double(c) * c;
    b += double(e) * e;
  }
  block_add_to(a, b, sums);
}

}  // namespace

Status ef_compensate(const void* x, ElemType t, size_t n, const float* residual, float* out,
                     cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  return by_type(t, [&](auto et) {
    SCCL_LAUNCH(ef_grid(n), kThreads, 0, stream, k_ef_compensate<decltype(et)::value>)
    (x, n, residual, out);
  });
}

Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                 double* sums_dev, cudaStream_t stream) {
  cudaMemsetAsync(sums_dev, 0, 2 * sizeof(double), stream);
  if (n > 0) {
    SCCL_LAUNCH(ef_grid(n), kThreads, 0, stream, k_ef_update)(comp, in, out, n, residual, sums_dev);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    return errorf(Code::kUnhandledCudaError, "error feedback kernel launch: %s",
                  cudaGetErrorString(e));
  }
  return Status::Ok();
}

cudaError_t preload_ef_kernels(size_t* max_local_bytes) {
  cudaError_t err = cudaSuccess;
  preload_one(k_ef_compensate<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_ef_compensate<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_ef_compensate<int(ElemType::kBf16)>, max_local_bytes, &err);
  preload_one(k_ef_update, max_local_bytes, &err);
  return err;
}

}  // namespace sketchccl::kernels::cuda
