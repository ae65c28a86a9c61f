// Kernels of the CUDA backend that are not codecs (built with nvcc only when CUDA is enabled).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sketchccl::backend::cuda_detail {

// One block, one thread: returns once (int32_t)(*flag - seq) >= 0. `flag` is mapped pinned memory.
cudaError_t launch_gate_spin(const volatile uint32_t* flag, uint32_t seq, cudaStream_t stream);

// Loads the spin kernel (as kernels::cuda::preload_kernels does the codecs': a lazy load at its
// first launch could wait for a held stream) and raises *max_local_bytes to its stack need.
cudaError_t preload_gate_kernels(size_t* max_local_bytes);

}  // namespace sketchccl::backend::cuda_detail
