#include "src/backend/cuda/gate_kernels.h"

#include "kernels/cuda/kernel_launch.h"

namespace sketchccl::backend::cuda_detail {
namespace {

__global__ void k_gate_spin(const volatile uint32_t* flag, uint32_t seq) {
  // The proxy writes the word from the host; volatile reads go to memory every time.
  while (static_cast<int32_t>(*flag - seq) < 0) {
    __nanosleep(2000);
  }
  __threadfence_system();
}

}  // namespace

cudaError_t launch_gate_spin(const volatile uint32_t* flag, uint32_t seq, cudaStream_t stream) {
  SCCL_LAUNCH(1, 1, 0, stream, k_gate_spin)(flag, seq);
  return cudaGetLastError();
}

cudaError_t preload_gate_kernels(size_t* max_local_bytes) {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, k_gate_spin);
  if (e == cudaSuccess && attr.localSizeBytes > *max_local_bytes) {
    *max_local_bytes = attr.localSizeBytes;
  }
  return e;
}

}  // namespace sketchccl::backend::cuda_detail
