#include "src/backend/cuda/kernel_preload.h"

#include <map>
#include <mutex>

#include "sketchccl_build_config.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/codec_cuda.h"
#include "src/backend/cuda/gate_kernels.h"
#endif

namespace sketchccl::backend {

#if SKETCHCCL_HAVE_CUDA

namespace {

struct Outcome {
  Status status;
  PreloadReport report;
};

Status load_all(int device, PreloadReport* rep) {
  // Every instantiation of the codec, sparse and error-feedback files, then the gate's kernel:
  // each file lists its own (kernels/cuda/codec_cuda.h).
  cudaError_t e = kernels::cuda::preload_kernels(&rep->max_local_bytes);
  if (e == cudaSuccess) e = cuda_detail::preload_gate_kernels(&rep->max_local_bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return errorf(Code::kUnhandledCudaError, "CUDA backend: loading the kernels on device %d: %s",
                  device, cudaGetErrorString(e));
  }
  // A launch needing more stack than the limit resizes local memory, which synchronizes the
  // context; raise the limit now instead (never lower it: the application may rely on it).
  size_t limit = 0;
  e = cudaDeviceGetLimit(&limit, cudaLimitStackSize);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return errorf(Code::kUnhandledCudaError, "CUDA backend: cudaDeviceGetLimit: %s",
                  cudaGetErrorString(e));
  }
  const size_t want = (rep->max_local_bytes + 255) & ~size_t(255);
  if (want > limit) {
    e = cudaDeviceSetLimit(cudaLimitStackSize, want);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "CUDA backend: cudaDeviceSetLimit(stack, %zu): %s",
                    want, cudaGetErrorString(e));
    }
    limit = want;
  }
  rep->stack_limit = limit;
  return Status::Ok();
}

}  // namespace

Status preload_kernels(int device, PreloadReport* report) {
  static std::mutex mu;
  static auto* done = new std::map<int, Outcome>();  // never destroyed: gates outlive statics
  std::lock_guard<std::mutex> lock(mu);
  auto it = done->find(device);
  if (it == done->end()) {
    Outcome o;
    o.status = load_all(device, &o.report);
    if (o.status.ok()) {
      SCCL_INFO(kLogInit, "device %d: kernels loaded, stack limit %zu bytes (largest frame %zu)",
                device, o.report.stack_limit, o.report.max_local_bytes);
    }
    it = done->emplace(device, o).first;
  }
  if (report != nullptr) *report = it->second.report;
  return it->second.status;
}

#else  // !SKETCHCCL_HAVE_CUDA

Status preload_kernels(int, PreloadReport*) {
  return Status(Code::kUnhandledCudaError, "built without CUDA: no kernels to load");
}

#endif

}  // namespace sketchccl::backend
