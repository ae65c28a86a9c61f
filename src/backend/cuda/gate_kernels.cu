#include "backend/cuda/gate_kernels.h"

#include "kernels/cuda/kernel_registry.h"

namespace sketchccl::backend::cuda_detail {
namespace {

__global__ void k_gate_spin(const volatile uint32_t* flag, uint32_t seq) {
  // The proxy writes the word from the host; volatile reads go to memory every time.
  while (static_cast<int32_t>(*flag - seq) < 0) {
    __nanosleep(2000);
  }
  __threadfence_system();
}

// Loaded with the codec kernels when the backend is created (kernels/cuda/kernel_registry.h).
SCCL_REGISTER_KERNELS(gate, SCCL_KERNEL_REF(k_gate_spin));

}  // namespace

cudaError_t launch_gate_spin(const volatile uint32_t* flag, uint32_t seq, cudaStream_t stream) {
  k_gate_spin<<<1, 1, 0, stream>>>(flag, seq);
  return cudaGetLastError();
}

}  // namespace sketchccl::backend::cuda_detail
