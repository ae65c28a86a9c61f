// Small kernels the GPU tests queue around an AllReduce to check stream ordering.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace sketchccl::gputest {

// x[i] = base + (i % 7), after spinning on the GPU for about `delay_ms` milliseconds (so that
// anything reading x too early sees the old contents).
cudaError_t fill_after_delay(float* x, size_t n, float base, int delay_ms, cudaStream_t s);
// *out = sum of x[i] in double (one block).
cudaError_t sum_to(const float* x, size_t n, double* out, cudaStream_t s);
// Spins on the GPU for about `ms` milliseconds.
cudaError_t spin_ms(int ms, cudaStream_t s);
// Loads these kernels now: under lazy module loading a kernel's first launch waits for the whole
// device, which waits in turn for a stream that waits for a staged call.
cudaError_t preload_kernels();

}  // namespace sketchccl::gputest
