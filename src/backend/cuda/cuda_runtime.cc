// The device runtime on CUDA (device_runtime.h): the stream operations of a staged call, its
// pinned staging memory, and the caller-side device scratch pool. Every function here runs on a
// caller's thread. Without CUDA in the build every call says so.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "sketchccl_build_config.h"
#include "src/backend/device_runtime.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda.h>  // driver types only: the functions come from cudaGetDriverEntryPoint
#include <cuda_runtime_api.h>

#include "kernels/cuda/codec_cuda.h"
#include "src/backend/cuda/flag_kernels.h"
#endif

namespace sketchccl::backend {

namespace {

std::atomic<bool> g_flag_kernels{false};

#if SKETCHCCL_HAVE_CUDA

Status cuda_error(cudaError_t e, const char* what) {
  cudaGetLastError();
  return errorf(Code::kUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// A driver function, ABI of CUDA 12.0, without linking libcuda; nullptr when unavailable.
// cudaGetDriverEntryPointByVersion exists from CUDA 12.5 (and is the only form in 13); older
// 12.x toolkits have cudaGetDriverEntryPoint, which returns the 12.0 ABI there.
void* driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else
  const cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
}

// Makes `device` current on this thread for the scope, then restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      cudaGetLastError();
      prev_ = -1;
    }
    if (prev_ != device) {
      err_ = cudaSetDevice(device);
      switched_ = err_ == cudaSuccess;
    }
  }
  ~DeviceScope() {
    if (switched_ && prev_ >= 0) cudaSetDevice(prev_);
  }
  cudaError_t error() const { return err_; }

 private:
  int prev_ = -1;
  bool switched_ = false;
  cudaError_t err_ = cudaSuccess;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  Status prepare(int device, std::string* how) override {
    count_call();
    std::lock_guard<std::mutex> lock(mu_);
    Flags& f = flags_[device];
    const bool kernels = g_flag_kernels.load();
    if (!f.prepared || f.kernels != kernels) {
      f = Flags{};
      f.kernels = kernels;
      DeviceScope scope(device);
      if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
      // Stream memory operations where the driver has them: they hold no SM, and a stream waiting
      // on one blocks only the work queued behind it. Else one-thread kernels, loaded now.
      if (!kernels) {
        f.wait = reinterpret_cast<WaitValueFn>(driver_fn("cuStreamWaitValue32"));
        f.write = reinterpret_cast<WriteValueFn>(driver_fn("cuStreamWriteValue32"));
      }
      if (f.wait == nullptr || f.write == nullptr) {
        f.wait = nullptr;
        f.write = nullptr;
        const cudaError_t e = cuda_detail::preload_flag_kernels();
        if (e != cudaSuccess) return cuda_error(e, "loading the flag kernels");
      }
      f.prepared = true;
    }
    if (how != nullptr) {
      *how = f.wait != nullptr ? "flags by cuStreamWriteValue32 / cuStreamWaitValue32"
                               : "flags by one-thread kernels";
    }
    return Status::Ok();
  }

  void* alloc_staging(int device, size_t bytes) override {
    count_call();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    void* p = nullptr;
    // Mapped: the flag writes and waits address it from the device; portable: any context.
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      SCCL_WARN(kLogColl, "cudaHostAlloc(%zu bytes) for device-call staging: %s", bytes,
                cudaGetErrorString(e));
      return nullptr;
    }
    std::memset(p, 0, bytes < 4096 ? bytes : 4096);  // the flags of a fresh block read 0
    return p;
  }

  void free_staging(int device, void* p) override {
    count_call();
    (void)device;
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  }

  Status copy_async(int device, void* dst, const void* src, size_t bytes, void* stream) override {
    count_call();
    if (bytes == 0) return Status::Ok();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    const cudaError_t e =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return cuda_error(e, "cudaMemcpyAsync (device-call staging)");
    return Status::Ok();
  }

  Status write_flag(int device, uint32_t* flag, uint32_t value, void* stream) override {
    count_call();
    return flag_op(device, false, flag, value, stream);
  }

  Status wait_flag(int device, const uint32_t* flag, uint32_t value, void* stream) override {
    count_call();
    return flag_op(device, true, flag, value, stream);
  }

  Status alloc_on_stream(int device, size_t bytes, void* stream, void** out) override {
    count_call();
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
  }

  Status free_on_stream(int device, void* p, void* stream) override {
    count_call();
    (void)device;
    const cudaError_t e = cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return cuda_error(e, "cudaFreeAsync");
    return Status::Ok();
  }

  Status prepare_codecs(int device) override {
    count_call();
    std::lock_guard<std::mutex> lock(mu_);
    if (codecs_ready_[device]) return Status::Ok();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    // Every codec kernel loaded now, on the caller's thread: under lazy loading a first launch
    // behind a held stream could wait for the whole context.
    size_t local = 0;
    cudaError_t e = kernels::cuda::preload_codec_kernels(&local);
    if (e != cudaSuccess) return cuda_error(e, "loading the codec kernels");
    size_t stack = 0;
    if ((e = cudaDeviceGetLimit(&stack, cudaLimitStackSize)) != cudaSuccess) {
      return cuda_error(e, "cudaDeviceGetLimit(StackSize)");
    }
    if (local > stack && (e = cudaDeviceSetLimit(cudaLimitStackSize, local)) != cudaSuccess) {
      return cuda_error(e, "cudaDeviceSetLimit(StackSize) for the codec kernels");
    }
    codecs_ready_[device] = true;
    return Status::Ok();
  }

  size_t codec_workspace_bytes(const kernels::CodecParams& p, size_t n) override {
    return kernels::cuda::workspace_bytes(p, n);
  }

  Status encode_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                          const void* x, kernels::ElemType t, size_t n, void* pkt, size_t cap,
                          void* ws, size_t ws_bytes, void* stream) override {
    count_call();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    return kernels::cuda::encode(p, x, t, n, pkt, cap, ws, ws_bytes,
                                 static_cast<cudaStream_t>(stream), call);
  }

  Status step_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                        const void* x, kernels::ElemType t, size_t n, void* pkt, size_t bytes,
                        void* ws, size_t ws_bytes, void* stream) override {
    count_call();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    return kernels::cuda::step(p, pkt, bytes, x, t, n, pkt, bytes, ws, ws_bytes,
                               static_cast<cudaStream_t>(stream), call);
  }

  Status decode_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                          const void* pkt, size_t bytes, void* y, kernels::ElemType t, size_t n,
                          float scale, void* ws, size_t ws_bytes, void* stream) override {
    count_call();
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    return kernels::cuda::decode(p, pkt, bytes, y, t, n, scale, nullptr, ws, ws_bytes,
                                 static_cast<cudaStream_t>(stream), nullptr, call);
  }

 private:
  struct Flags {
    bool prepared = false;
    bool kernels = false;  // use_flag_kernels_for_test when prepared
    WaitValueFn wait = nullptr;
    WriteValueFn write = nullptr;
  };
  // The device's flag mechanism, prepared on first use (a flag kernel is loaded before its first
  // launch, which could otherwise synchronize the context under lazy loading).
  Status flags_of(int device, Flags* out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Flags& f = flags_[device];
      if (f.prepared) {
        *out = f;
        return Status::Ok();
      }
    }
    SCCL_RETURN_IF_ERROR(prepare(device, nullptr));
    std::lock_guard<std::mutex> lock(mu_);
    *out = flags_[device];
    return Status::Ok();
  }

  // Enqueues a flag write (`wait` false) or wait on `stream`: a stream memory operation, else a
  // one-thread kernel. Under CUDA_LAUNCH_BLOCKING the wait kernel's launch returns once the proxy
  // wrote the flag: the call's work is already queued on the proxy (device_staging.h).
  Status flag_op(int device, bool wait, const uint32_t* flag, uint32_t value, void* stream) {
    DeviceScope scope(device);
    if (scope.error() != cudaSuccess) return cuda_error(scope.error(), "cudaSetDevice");
    Flags f;
    SCCL_RETURN_IF_ERROR(flags_of(device, &f));
    void* dev = nullptr;
    SCCL_RETURN_IF_ERROR(device_address(flag, &dev));
    auto s = static_cast<cudaStream_t>(stream);
    const auto addr = reinterpret_cast<CUdeviceptr>(dev);
    if (f.wait != nullptr) {
      const CUresult r =
          wait ? f.wait(reinterpret_cast<CUstream>(s), addr, value, CU_STREAM_WAIT_VALUE_EQ)
               : f.write(reinterpret_cast<CUstream>(s), addr, value, CU_STREAM_WRITE_VALUE_DEFAULT);
      if (r != CUDA_SUCCESS) {
        return errorf(Code::kUnhandledCudaError, "%s: CUresult %d",
                      wait ? "cuStreamWaitValue32" : "cuStreamWriteValue32", static_cast<int>(r));
      }
      return Status::Ok();
    }
    const cudaError_t e =
        wait ? cuda_detail::launch_flag_wait(static_cast<const volatile uint32_t*>(dev), value, s)
             : cuda_detail::launch_flag_write(static_cast<uint32_t*>(dev), value, s);
    if (e != cudaSuccess) return cuda_error(e, wait ? "flag wait kernel" : "flag write kernel");
    return Status::Ok();
  }

  // The device's address of a word of staging memory (mapped; equal to the host address under
  // UVA, asked regardless).
  static Status device_address(const void* host, void** dev) {
    const cudaError_t e = cudaHostGetDevicePointer(dev, const_cast<void*>(host), 0);
    if (e != cudaSuccess) return cuda_error(e, "cudaHostGetDevicePointer of a staging flag");
    return Status::Ok();
  }

  // The caller-side scratch pool of `device`, made once and kept (the runtime is never
  // destroyed): not the device's default pool, which the application may use (PyTorch's
  // cudaMallocAsync allocator), and without internal dependencies, which could make one stream
  // wait for another.
  Status pool_of(int device, cudaMemPool_t* out) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaMemPool_t& pool = pools_[device];
    if (pool != nullptr) {
      *out = pool;
      return Status::Ok();
    }
    int supported = 0;
    cudaError_t e = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess) return cuda_error(e, "cudaDeviceGetAttribute(MemoryPoolsSupported)");
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
    if ((e = cudaMemPoolCreate(&made, &props)) != cudaSuccess) {
      return cuda_error(e, "cudaMemPoolCreate");
    }
    int off = 0;
    uint64_t keep = UINT64_MAX;  // the next call's scratch without a new mapping
    if ((e = cudaMemPoolSetAttribute(made, cudaMemPoolReuseAllowInternalDependencies, &off)) !=
            cudaSuccess ||
        (e = cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &keep)) !=
            cudaSuccess) {
      cudaMemPoolDestroy(made);
      return cuda_error(e, "cudaMemPoolSetAttribute");
    }
    pool = made;
    *out = pool;
    return Status::Ok();
  }

  std::mutex mu_;
  std::map<int, Flags> flags_;
  std::map<int, bool> codecs_ready_;
  std::map<int, cudaMemPool_t> pools_;
};

#else  // !SKETCHCCL_HAVE_CUDA

Status no_cuda() {
  return Status(Code::kUnhandledCudaError, "built without CUDA");
}

class CudaRuntime final : public DeviceRuntime {
 public:
  Status prepare(int, std::string*) override { return no_cuda(); }
  void* alloc_staging(int, size_t) override { return nullptr; }
  void free_staging(int, void*) override {}
  Status copy_async(int, void*, const void*, size_t, void*) override { return no_cuda(); }
  Status write_flag(int, uint32_t*, uint32_t, void*) override { return no_cuda(); }
  Status wait_flag(int, const uint32_t*, uint32_t, void*) override { return no_cuda(); }
};

#endif

}  // namespace

void use_flag_kernels_for_test(bool on) {
  g_flag_kernels.store(on);
}

DeviceRuntime& cuda_device_runtime() {
  static CudaRuntime* cuda = new CudaRuntime();  // never destroyed: used by exit-time teardown
  return *cuda;
}

}  // namespace sketchccl::backend
