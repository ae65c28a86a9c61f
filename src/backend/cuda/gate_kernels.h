// Kernels of the CUDA backend that are not codecs (built with nvcc only when CUDA is enabled).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sketchccl::backend::cuda_detail {

// One block, one thread: returns once (int32_t)(*flag - seq) >= 0. `flag` is mapped pinned memory.
cudaError_t launch_gate_spin(const volatile uint32_t* flag, uint32_t seq, cudaStream_t stream);

}  // namespace sketchccl::backend::cuda_detail
