#include "backend/cuda/kernel_preload.h"

#include <map>
#include <mutex>

#include "core/log.h"
#include "sketchccl_build_config.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/kernel_registry.h"
#endif

namespace sketchccl::backend {

#if SKETCHCCL_HAVE_CUDA

namespace {

struct Outcome {
  Status status;
  PreloadReport report;
};

Status load_all(int device, PreloadReport* rep) {
  const auto kernels = kernels::cuda::KernelRegistry::get().list();
  for (const kernels::cuda::KernelRef& k : kernels) {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, k.fn);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "CUDA backend: loading kernel %s on device %d: %s",
                    k.name, device, cudaGetErrorString(e));
    }
    rep->kernels++;
    if (attr.localSizeBytes > rep->max_local_bytes) rep->max_local_bytes = attr.localSizeBytes;
  }
  // A launch needing more stack than the limit resizes local memory, which synchronizes the
  // context; raise the limit now instead (never lower it: the application may rely on it).
  size_t limit = 0;
  cudaError_t e = cudaDeviceGetLimit(&limit, cudaLimitStackSize);
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
      SCCL_INFO(kLogInit, "device %d: %d kernels loaded, stack limit %zu bytes (largest frame %zu)",
                device, o.report.kernels, o.report.stack_limit, o.report.max_local_bytes);
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
