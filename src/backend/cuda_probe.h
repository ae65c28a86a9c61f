// What CUDA devices this process can see, or why it sees none.
#pragma once

#include <string>
#include <vector>

namespace sketchccl::backend {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  size_t memory_bytes = 0;
};

struct CudaProbe {
  bool compiled = false;  // built with CUDA
  std::vector<CudaDeviceInfo> devices;
  std::string reason;       // why there are none (driver missing, ...)
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int driver_version = 0;   // cudaDriverGetVersion (0: no driver)
};

// "No device" includes cudaErrorInsufficientDriver and cudaErrorNoDevice; never fails.
CudaProbe probe_cuda();

}  // namespace sketchccl::backend
