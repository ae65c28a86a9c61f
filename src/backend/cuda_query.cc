#include "backend/cuda_query.h"

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
