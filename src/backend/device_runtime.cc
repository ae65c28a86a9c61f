#include "src/backend/device_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "sketchccl_build_config.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/stream_gate.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

}  // namespace

StreamEnv stream_env_from_environment() {
  StreamEnv env;
  const char* lb = std::getenv("CUDA_LAUNCH_BLOCKING");
  env.launch_blocking = lb != nullptr && std::strcmp(lb, "1") == 0;
  env.injection_tool = env_set("CUDA_INJECTION64_PATH");
  if (const char* mc = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS")) {
    char* end = nullptr;
    const long n = std::strtol(mc, &end, 10);
    if (end != mc) env.max_connections = n;  // not a number: CUDA ignores it too
  }
  return env;
}

StreamMode stream_mode(const StreamEnv& env, std::string* why) {
  const char* reason = nullptr;
  if (env.launch_blocking) {
    reason = "CUDA_LAUNCH_BLOCKING=1 (a launch returns only when its kernel ends)";
  } else if (env.injection_tool) {
    reason =
        "a CUDA injection tool is loaded (CUDA_INJECTION64_PATH: compute-sanitizer, ncu, "
        "nsys), which may serialize launches";
  } else if (env.max_connections <= 1) {
    reason = "CUDA_DEVICE_MAX_CONNECTIONS<=1 (every stream shares one hardware queue)";
  }
  if (reason == nullptr) return StreamMode::kGated;
  if (why != nullptr) *why = reason;
  return StreamMode::kSynchronous;
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

namespace {

class CudaRuntime final : public DeviceRuntime {
 public:
  Status make_gate(int device, std::unique_ptr<StreamGate>* out) override {
    std::unique_ptr<CudaStreamGate> gate;
    SCCL_RETURN_IF_ERROR(CudaStreamGate::create(device, CudaStreamGate::Mechanism::kAuto, &gate));
    *out = std::move(gate);
    return Status::Ok();
  }
  Status make_backend(int device, std::unique_ptr<Backend>* out) override {
    std::unique_ptr<CudaBackend> cuda;
    SCCL_RETURN_IF_ERROR(make_cuda_backend(device, &cuda));
    *out = std::move(cuda);
    return Status::Ok();
  }
  Status synchronize(int device, void* stream, double timeout_s) override {
#if SKETCHCCL_HAVE_CUDA
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
      cudaGetLastError();
      prev = -1;
    }
    if (prev != device && cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "cudaSetDevice(%d)", device);
    }
    Status st = drain(static_cast<cudaStream_t>(stream), timeout_s);
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
    return st;
#else
    (void)device;
    (void)stream;
    (void)timeout_s;
    return Status(Code::kUnhandledCudaError, "built without CUDA");
#endif
  }
  Status alloc_on_stream(int device, size_t bytes, void* stream, void** out) override {
#if SKETCHCCL_HAVE_CUDA
    cudaMemPool_t pool = nullptr;
    SCCL_RETURN_IF_ERROR(pool_of(device, &pool));
    const cudaError_t e =
        cudaMallocFromPoolAsync(out, bytes, pool, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "cudaMallocFromPoolAsync(%zu bytes, device %d): %s",
                    bytes, device, cudaGetErrorString(e));
    }
    return Status::Ok();
#else
    (void)device, (void)bytes, (void)stream, (void)out;
    return Status(Code::kUnhandledCudaError, "built without CUDA");
#endif
  }
  Status free_on_stream(int device, void* p, void* stream) override {
    (void)device;
#if SKETCHCCL_HAVE_CUDA
    const cudaError_t e = cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "cudaFreeAsync: %s", cudaGetErrorString(e));
    }
    return Status::Ok();
#else
    (void)p, (void)stream;
    return Status(Code::kUnhandledCudaError, "built without CUDA");
#endif
  }
  StreamMode mode(std::string* why) override {
    static const std::string reason = [] {
      std::string r;
      if (stream_mode(stream_env_from_environment(), &r) == StreamMode::kSynchronous) {
        SCCL_INFO(kLogInit,
                  "%s: AllReduces on device buffers run without the stream gate, synchronously on "
                  "the caller's thread (its stream is drained first)",
                  r.c_str());
      }
      return r;
    }();
    if (reason.empty()) return StreamMode::kGated;
    if (why != nullptr) *why = reason;
    return StreamMode::kSynchronous;
  }

 private:
#if SKETCHCCL_HAVE_CUDA
  // An event behind the stream's work, polled: bounded, and legal while other threads capture.
  static Status drain(cudaStream_t s, double timeout_s) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cap) != cudaSuccess) cudaGetLastError();
    if (cap != cudaStreamCaptureStatusNone) {
      return Status(Code::kInvalidUsage,
                    "a device AllReduce in a CUDA graph capture needs the stream gate, which is "
                    "off in this process (CUDA_LAUNCH_BLOCKING, an injection tool or one "
                    "hardware queue)");
    }
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, s);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (e == cudaSuccess) {
      e = cudaEventQuery(ev);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) break;
      e = cudaSuccess;
      if (std::chrono::steady_clock::now() >= deadline) {
        cudaEventDestroy(ev);
        return errorf(Code::kRemoteError,
                      "the caller's stream did not reach the AllReduce within SKETCHCCL_TIMEOUT "
                      "(%.0f s)",
                      timeout_s);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (ev != nullptr) cudaEventDestroy(ev);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "draining the caller's stream: %s",
                    cudaGetErrorString(e));
    }
    return Status::Ok();
  }

  // The caller-side scratch pool of `device`, made once and kept (the runtime is never
  // destroyed): not the device's default pool, which the application may use (PyTorch's
  // cudaMallocAsync allocator), and without internal dependencies, which could make a gated
  // stream wait for another.
  Status pool_of(int device, cudaMemPool_t* out) {
    std::lock_guard<std::mutex> lock(pools_mu_);
    cudaMemPool_t& pool = pools_[device];
    if (pool != nullptr) {
      *out = pool;
      return Status::Ok();
    }
    auto failed = [device](const char* what, cudaError_t e) {
      cudaGetLastError();
      return errorf(Code::kUnhandledCudaError, "%s (device %d): %s", what, device,
                    cudaGetErrorString(e));
    };
    int supported = 0;
    cudaError_t e = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess) return failed("cudaDeviceGetAttribute(MemoryPoolsSupported)", e);
    if (supported == 0) {
      return errorf(Code::kUnhandledCudaError,
                    "device %d does not support memory pools (cudaMallocAsync)", device);
    }
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t made = nullptr;
    if ((e = cudaMemPoolCreate(&made, &props)) != cudaSuccess)
      return failed("cudaMemPoolCreate", e);
    int off = 0;
    uint64_t keep = UINT64_MAX;  // the next call's scratch without a new mapping
    if ((e = cudaMemPoolSetAttribute(made, cudaMemPoolReuseAllowInternalDependencies, &off)) !=
            cudaSuccess ||
        (e = cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep)) !=
            cudaSuccess) {
      cudaMemPoolDestroy(made);
      return failed("cudaMemPoolSetAttribute", e);
    }
    pool = made;
    *out = pool;
    return Status::Ok();
  }

  std::mutex pools_mu_;
  std::map<int, cudaMemPool_t> pools_;
#endif
};

std::atomic<DeviceRuntime*> g_model{nullptr};

}  // namespace

DeviceRuntime& device_runtime() {
  static CudaRuntime* cuda = new CudaRuntime();  // never destroyed: used by exit-time teardown
  DeviceRuntime* m = g_model.load();
  return m != nullptr ? *m : *cuda;
}

void set_device_runtime_for_test(DeviceRuntime* model) {
  g_model.store(model);
}

}  // namespace sketchccl::backend
