#include "src/backend/device_runtime.h"

#include <atomic>

#include "sketchccl_build_config.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

namespace {

thread_local bool t_on_proxy = false;
std::atomic<uint64_t> g_proxy_calls{0};
std::atomic<DeviceRuntime*> g_model{nullptr};

}  // namespace

ProxyThreadMark::ProxyThreadMark() {
  t_on_proxy = true;
}
ProxyThreadMark::~ProxyThreadMark() {
  t_on_proxy = false;
}

void DeviceRuntime::count_call() {
  if (!t_on_proxy) return;
  // A design error, never a user's: the proxy must not wait on anything a held stream needs.
  if (g_proxy_calls.fetch_add(1, std::memory_order_relaxed) == 0) {
    SCCL_WARN(kLogColl, "a device runtime call on a communicator's proxy thread (a defect)");
  }
}

uint64_t DeviceRuntime::proxy_calls() const {
  return g_proxy_calls.load(std::memory_order_relaxed);
}

#if SKETCHCCL_HAVE_CUDA

RelaxedCaptureScope::RelaxedCaptureScope() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) {
    prev_ = static_cast<int>(mode);
  } else {
    cudaGetLastError();
  }
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  if (prev_ < 0) return;
  auto mode = static_cast<cudaStreamCaptureMode>(prev_);
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) cudaGetLastError();
}

#else

RelaxedCaptureScope::RelaxedCaptureScope() {
  (void)prev_;  // no capture modes without CUDA
}
RelaxedCaptureScope::~RelaxedCaptureScope() = default;

#endif

DeviceRuntime& device_runtime() {
  DeviceRuntime* m = g_model.load();
  return m != nullptr ? *m : cuda_device_runtime();
}

void set_device_runtime_for_test(DeviceRuntime* model) {
  g_model.store(model);
}

}  // namespace sketchccl::backend
