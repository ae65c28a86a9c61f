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

// The CUDA backend is the next issue; until then device buffers are forwarded.
bool has_cuda_backend() {
  return false;
}

}  // namespace sketchccl::backend
