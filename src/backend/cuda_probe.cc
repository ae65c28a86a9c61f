#include "src/backend/cuda_probe.h"

#include <cstdio>

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

std::string CudaProbe::driver_meaning() const {
  if (!compiled) return "built without CUDA: device buffers are forwarded";
  char buf[256];
  const int rmaj = runtime_version / 1000, rmin = runtime_version % 1000 / 10;
  if (driver_version == 0) {
    std::snprintf(buf, sizeof(buf),
                  "no CUDA driver: device buffers are forwarded (a driver supporting CUDA %d.%d "
                  "or newer is needed)",
                  rmaj, rmin);
  } else if (driver_too_old()) {
    std::snprintf(buf, sizeof(buf),
                  "driver too old for runtime %d.%d: device buffers are forwarded; rebuild "
                  "SketchCCL with a CUDA toolkit no newer than %d.%d (docs/building.md)",
                  rmaj, rmin, driver_version / 1000, driver_version % 1000 / 10);
  } else if (driver_version < runtime_version) {
    std::snprintf(buf, sizeof(buf),
                  "driver %d.%d runs runtime %d.%d under CUDA's minor-version compatibility: the "
                  "device path can run",
                  driver_version / 1000, driver_version % 1000 / 10, rmaj, rmin);
  } else {
    std::snprintf(buf, sizeof(buf), "driver supports runtime %d.%d: the device path can run", rmaj,
                  rmin);
  }
  return buf;
}

CudaProbe probe_cuda() {
  CudaProbe p;
#if SKETCHCCL_HAVE_CUDA
  p.compiled = true;
  cudaRuntimeGetVersion(&p.runtime_version);
  cudaDriverGetVersion(&p.driver_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.insufficient_driver = err == cudaErrorInsufficientDriver;
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
