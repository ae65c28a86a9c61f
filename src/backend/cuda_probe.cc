#include "backend/cuda_probe.h"

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

CudaProbe probe_cuda() {
  CudaProbe p;
#if SKETCHCCL_HAVE_CUDA
  p.compiled = true;
  cudaRuntimeGetVersion(&p.runtime_version);
  cudaDriverGetVersion(&p.driver_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return p;
  }
  if (count == 0) p.reason = "cudaGetDeviceCount found no device";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    p.devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
#else
  p.reason = "built without CUDA (configure with -Dcuda=enabled and nvcc on PATH)";
#endif
  return p;
}

}  // namespace sketchccl::backend
