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

  bool insufficient_driver = false;  // cudaGetDeviceCount said cudaErrorInsufficientDriver

  // A driver is installed but supports an older CUDA major version than the runtime linked in
  // (or CUDA itself says it is insufficient): CUDA calls fail, and device buffers are forwarded
  // (docs/cuda.md). An older minor version of the same major runs under CUDA's minor-version
  // compatibility and is not too old.
  bool driver_too_old() const {
    return compiled && driver_version > 0 &&
           (driver_version / 1000 < runtime_version / 1000 || insufficient_driver);
  }
  // One line on what the runtime and driver versions mean for the device path.
  std::string driver_meaning() const;
};

// "No device" includes cudaErrorInsufficientDriver and cudaErrorNoDevice; never fails.
CudaProbe probe_cuda();

}  // namespace sketchccl::backend
