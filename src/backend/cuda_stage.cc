#include "src/backend/cuda_stage.h"

#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {
namespace {

#if SKETCHCCL_HAVE_CUDA
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return errorf(Code::kUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}
#endif

}  // namespace

Status stage_to_host(void* dst, const void* src, size_t bytes, void* stream) {
#if SKETCHCCL_HAVE_CUDA
  auto s = static_cast<cudaStream_t>(stream);
  if (bytes == 0) return cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  SCCL_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync"));
  return cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize");
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return Status(Code::kInvalidUsage, "no CUDA in this build: device memory cannot be staged");
#endif
}

Status stage_to_device(void* dst, const void* src, size_t bytes, void* stream) {
#if SKETCHCCL_HAVE_CUDA
  auto s = static_cast<cudaStream_t>(stream);
  if (bytes == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(
      cuda_status(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync"));
  return cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize");
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return Status(Code::kInvalidUsage, "no CUDA in this build: device memory cannot be staged");
#endif
}

Status device_alloc(void** ptr, size_t bytes) {
#if SKETCHCCL_HAVE_CUDA
  return cuda_status(cudaMalloc(ptr, bytes), "cudaMalloc");
#else
  (void)ptr, (void)bytes;
  return Status(Code::kInvalidUsage, "no CUDA in this build: no device memory");
#endif
}

Status device_free(void* ptr) {
#if SKETCHCCL_HAVE_CUDA
  return cuda_status(cudaFree(ptr), "cudaFree");
#else
  (void)ptr;
  return Status(Code::kInvalidUsage, "no CUDA in this build: no device memory");
#endif
}

}  // namespace sketchccl::backend
