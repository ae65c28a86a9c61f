// Whether a CUDA device is visible: the GPU tests skip without one (here cudaGetDeviceCount fails
// with cudaErrorInsufficientDriver, which is "no device", not an error).
#pragma once

#include <cuda_runtime_api.h>

namespace sketchccl::gpu_test {

inline bool have_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace sketchccl::gpu_test
