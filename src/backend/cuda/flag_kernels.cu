#include "src/backend/cuda/flag_kernels.h"

#include "kernels/cuda/kernel_launch.h"

namespace sketchccl::backend::cuda_detail {
namespace {

__global__ void k_flag_write(uint32_t* flag, uint32_t value) {
  // The stream's earlier copies are visible to the host before the flag is.
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(flag) = value;
  __threadfence_system();
}

__global__ void k_flag_wait(const volatile uint32_t* flag, uint32_t value) {
  // The proxy writes the word from the host; volatile reads go to memory every time.
  while (*flag != value) {
    __nanosleep(2000);
  }
  __threadfence_system();
}

}  // namespace

cudaError_t launch_flag_write(uint32_t* flag, uint32_t value, cudaStream_t stream) {
  SCCL_LAUNCH(1, 1, 0, stream, k_flag_write)(flag, value);
  return cudaGetLastError();
}

cudaError_t launch_flag_wait(const volatile uint32_t* flag, uint32_t value, cudaStream_t stream) {
  SCCL_LAUNCH(1, 1, 0, stream, k_flag_wait)(flag, value);
  return cudaGetLastError();
}

cudaError_t preload_flag_kernels() {
  cudaFuncAttributes attr{};
  cudaError_t e = cudaFuncGetAttributes(&attr, k_flag_write);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, k_flag_wait);
  return e;
}

}  // namespace sketchccl::backend::cuda_detail
