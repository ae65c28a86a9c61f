// The one-thread kernels that write and wait for a staged call's host flags where the driver has
// no stream memory operations (built with nvcc only when CUDA is enabled).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sketchccl::backend::cuda_detail {

// *flag = value once the stream's earlier work is done; `flag` is mapped pinned memory.
cudaError_t launch_flag_write(uint32_t* flag, uint32_t value, cudaStream_t stream);
// Returns once *flag == value (the host writes it).
cudaError_t launch_flag_wait(const volatile uint32_t* flag, uint32_t value, cudaStream_t stream);
// Loads both kernels now (a lazy load at a first launch may synchronize the context).
cudaError_t preload_flag_kernels();

}  // namespace sketchccl::backend::cuda_detail
