#include "tests/gpu/test_kernels.h"

#include <cstdint>

#include "kernels/cuda/kernel_launch.h"

namespace sketchccl::gputest {
namespace {

__device__ uint64_t now_ns() {
#if defined(CUDAEMU_DEVICE_H)  // the emulated build: the host's clock stands for %globaltimer
  return uint64_t(clock64());
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

__device__ void delay(int ms) {
  const uint64_t end = now_ns() + static_cast<uint64_t>(ms) * 1000000ull;
  while (now_ns() < end) {
    __nanosleep(10000);
  }
}

__global__ void k_fill_after_delay(float* x, size_t n, float base, int delay_ms) {
  if (delay_ms > 0) {
    if (threadIdx.x == 0) delay(delay_ms);
    __syncthreads();
  }
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    x[i] = base + static_cast<float>(i % 7);
  }
}

__global__ void k_sum(const float* x, size_t n, double* out) {
  __shared__ double part[256];
  double s = 0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x)
    s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

__global__ void k_spin(int ms) {
  delay(ms);
}

}  // namespace

cudaError_t fill_after_delay(float* x, size_t n, float base, int delay_ms, cudaStream_t s) {
  // One block when delaying, so that the delay holds back every write.
  const unsigned blocks = delay_ms > 0 ? 1u : 256u;
  SCCL_LAUNCH(blocks, 256, 0, s, k_fill_after_delay)(x, n, base, delay_ms);
  return cudaGetLastError();
}

cudaError_t sum_to(const float* x, size_t n, double* out, cudaStream_t s) {
  SCCL_LAUNCH(1, 256, 0, s, k_sum)(x, n, out);
  return cudaGetLastError();
}

cudaError_t spin_ms(int ms, cudaStream_t s) {
  SCCL_LAUNCH(1, 1, 0, s, k_spin)(ms);
  return cudaGetLastError();
}

cudaError_t preload_kernels() {
  cudaFuncAttributes attr{};
  for (const void* k :
       {reinterpret_cast<const void*>(k_fill_after_delay), reinterpret_cast<const void*>(k_sum),
        reinterpret_cast<const void*>(k_spin)}) {
    const cudaError_t e = cudaFuncGetAttributes(&attr, k);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace sketchccl::gputest
