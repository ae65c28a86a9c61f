#include "backend/cuda_query.h"

#include <cstdlib>

#include "backend/cuda_probe.h"
#include "core/log.h"
#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

bool is_device_pointer(const void* p) {
#if SKETCHCCL_HAVE_CUDA
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // no driver, or unknown pointer: host memory
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
#else
  (void)p;
  return false;
#endif
}

bool stream_is_capturing(void* stream) {
#if SKETCHCCL_HAVE_CUDA
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
#else
  (void)stream;
  return false;
#endif
}

// A build with CUDA and at least one visible device (asked once: the answer does not change
// within a process). Without a driver cudaGetDeviceCount fails (cudaErrorInsufficientDriver or
// cudaErrorNoDevice): no backend, and device buffers are forwarded (or refused in standalone).
bool has_cuda_backend() {
#if SKETCHCCL_HAVE_CUDA
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return present;
#else
  return false;
#endif
}

bool max_connections_allow_device_path(const char* value) {
  if (value == nullptr || *value == '\0') return true;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (end == value) return true;  // not a number: CUDA ignores it too
  return n > 1;
}

// Asked once per process: the driver, the device count and the environment do not change.
bool device_path_usable(const char** reason) {
  struct Verdict {
    bool usable;
    const char* reason;
  };
  static const Verdict v = []() -> Verdict {
    const CudaProbe p = probe_cuda();
    if (p.driver_too_old()) {
      SCCL_WARN(kLogInit,
                "CUDA driver %d.%d is older than the CUDA runtime %d.%d SketchCCL was built with: "
                "device buffers are forwarded to NCCL (rebuild with a toolkit no newer than the "
                "driver, docs/building.md)",
                p.driver_version / 1000, p.driver_version % 1000 / 10, p.runtime_version / 1000,
                p.runtime_version % 1000 / 10);
      return {false, "the CUDA driver is older than SketchCCL's CUDA runtime"};
    }
    if (!has_cuda_backend()) return {false, "device buffers need the CUDA backend"};
    if (!max_connections_allow_device_path(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"))) {
      // One hardware queue: the caller's work queued behind the stream gate would block the
      // backend's kernels and copies behind it (docs/cuda.md).
      SCCL_WARN(kLogInit,
                "CUDA_DEVICE_MAX_CONNECTIONS=%s: all streams share one hardware queue, where a "
                "stream held by SketchCCL could block its own codec work; device buffers are "
                "forwarded to NCCL",
                std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
      return {false, "CUDA_DEVICE_MAX_CONNECTIONS<=1: device buffers are forwarded"};
    }
    return {true, ""};
  }();
  if (reason != nullptr) *reason = v.reason;
  return v.usable;
}

int current_cuda_device() {
#if SKETCHCCL_HAVE_CUDA
  if (!has_cuda_backend()) return 0;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return dev;
#else
  return 0;
#endif
}

}  // namespace sketchccl::backend
