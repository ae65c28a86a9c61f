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

  // A driver is installed but supports an older CUDA than the runtime linked in: CUDA calls fail
  // with cudaErrorInsufficientDriver, and device buffers are forwarded (docs/cuda.md).
  bool driver_too_old() const {
    return compiled && driver_version > 0 && driver_version < runtime_version;
  }
  // One line on what the runtime and driver versions mean for the device path.
  std::string driver_meaning() const;
};

// "No device" includes cudaErrorInsufficientDriver and cudaErrorNoDevice; never fails.
CudaProbe probe_cuda();

}  // namespace sketchccl::backend
