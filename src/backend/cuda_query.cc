#include "src/backend/cuda_query.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "sketchccl_build_config.h"
#include "src/backend/cuda_probe.h"
#include "src/backend/device_runtime.h"
#include "src/core/log.h"

#if SKETCHCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace sketchccl::backend {

namespace {

// The driver API's pointer query, from a libcuda.so.1 the process has already loaded (RTLD_NOLOAD:
// SketchCCL never loads or initialises the driver). Values from cuda.h, which a build without
// CUDA does not have.
using CuPointerGetAttribute = int (*)(void* data, int attribute, unsigned long long ptr);
constexpr int kCuSuccess = 0;
constexpr int kCuErrorInvalidValue = 1;    // not a pointer CUDA knows: plain host memory
constexpr int kCuErrorNotInitialized = 3;  // cuInit never ran: no device memory exists
constexpr int kCuPointerAttributeMemoryType = 2;
constexpr int kCuPointerAttributeIsManaged = 8;
constexpr unsigned kCuMemoryTypeHost = 1;

std::atomic<CuPointerGetAttribute> g_driver_query{nullptr};

// Null while no driver is loaded in the process (asked again on later calls: the program may
// load CUDA after its first collective).
CuPointerGetAttribute driver_query() {
  CuPointerGetAttribute fn = g_driver_query.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return nullptr;
  fn = reinterpret_cast<CuPointerGetAttribute>(dlsym(h, "cuPointerGetAttribute"));
  dlclose(h);  // drops only the reference RTLD_NOLOAD took: the program's stays
  if (fn != nullptr) g_driver_query.store(fn, std::memory_order_release);
  return fn;
}

// kHost (not yet checked readable), kDevice, or kUnknown, from the driver.
MemoryQuery ask_driver(const void* p) {
  CuPointerGetAttribute query = driver_query();
  if (query == nullptr) return {MemoryClass::kHost, ""};  // no driver: no device memory either
  unsigned mem_type = 0;
  const int r = query(&mem_type, kCuPointerAttributeMemoryType, reinterpret_cast<uintptr_t>(p));
  if (r == kCuErrorInvalidValue || r == kCuErrorNotInitialized) return {MemoryClass::kHost, ""};
  if (r != kCuSuccess) return {MemoryClass::kUnknown, "cuPointerGetAttribute failed"};
  unsigned managed = 0;
  if (query(&managed, kCuPointerAttributeIsManaged, reinterpret_cast<uintptr_t>(p)) == kCuSuccess &&
      managed != 0) {
    return {MemoryClass::kDevice, ""};
  }
  return {mem_type == kCuMemoryTypeHost ? MemoryClass::kPinned : MemoryClass::kDevice, ""};
}

#if SKETCHCCL_HAVE_CUDA
// The runtime's answer; on failure (no driver, a driver older than the runtime) the driver's.
MemoryQuery ask_cuda(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return ask_driver(p);
  }
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
    return {MemoryClass::kDevice, ""};
  }
  // Page-locked memory is written by stream work (a copy into it), so it is ordered like device
  // memory: a call reads it only after the stream's earlier work (docs/cuda.md).
  if (attr.type == cudaMemoryTypeHost) return {MemoryClass::kPinned, ""};
  return {MemoryClass::kHost, ""};
}
#else
MemoryQuery ask_cuda(const void* p) {
  return ask_driver(p);
}
#endif

// Whether one byte at `p` can be read, asked of the kernel (EFAULT, never SIGSEGV).
bool readable_byte(const void* p) {
  char byte = 0;
  iovec local{&byte, 1};
  iovec remote{const_cast<void*>(p), 1};
  const ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (n == 1) return true;
  if (errno == EFAULT) return false;
  // process_vm_readv refused (seccomp, old kernel): a pipe's write copies from `p` too.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  const bool ok = write(fds[1], p, 1) == 1;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

}  // namespace

MemoryQuery classify_memory(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return {MemoryClass::kHost, ""};
  if (reinterpret_cast<uintptr_t>(p) > UINTPTR_MAX - (bytes - 1)) {
    return {MemoryClass::kUnknown, "the buffer wraps around the address space"};
  }
  MemoryQuery q = device_runtime().pointer_memory(p);
  if (q.cls != MemoryClass::kHost) return q;
  // CUDA's device reservations are inaccessible host mappings to a process without CUDA: memory
  // that cannot be read is not host memory SketchCCL may take over.
  const auto* first = static_cast<const char*>(p);
  if (!readable_byte(first) || !readable_byte(first + bytes - 1)) {
    return {MemoryClass::kUnknown, "not readable host memory and not memory CUDA knows"};
  }
  return q;
}

bool is_device_pointer(const void* p) {
  return classify_memory(p, 1).cls == MemoryClass::kDevice;
}

bool stream_is_capturing(void* stream) {
  return device_runtime().stream_capture(stream) != CaptureState::kNone;
}

bool has_cuda_backend() {
  return device_runtime().has_backend();
}

bool device_path_usable(const char** reason) {
  return device_runtime().device_path_usable(reason);
}

int current_cuda_device() {
  return device_runtime().current_device();
}

namespace cuda_answer {

MemoryQuery pointer_memory(const void* p) {
  return ask_cuda(p);
}

CaptureState stream_capture(void* stream) {
#if SKETCHCCL_HAVE_CUDA
  if (!has_backend()) return CaptureState::kNone;  // no device: no stream can capture
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status) != cudaSuccess) {
    cudaGetLastError();
    return CaptureState::kUnknown;
  }
  return status == cudaStreamCaptureStatusNone ? CaptureState::kNone : CaptureState::kCapturing;
#else
  (void)stream;
  return CaptureState::kNone;
#endif
}

// A build with CUDA and at least one visible device (asked once: the answer does not change
// within a process). Without a driver cudaGetDeviceCount fails (cudaErrorInsufficientDriver or
// cudaErrorNoDevice): no backend, and device buffers are forwarded (or refused in standalone).
bool has_backend() {
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

}  // namespace cuda_answer

namespace cuda_answer {

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
    if (!has_backend()) return {false, "device buffers need CUDA and a device"};
    return {true, ""};
  }();
  if (reason != nullptr) *reason = v.reason;
  return v.usable;
}

int current_device() {
#if SKETCHCCL_HAVE_CUDA
  if (!has_backend()) return 0;
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

}  // namespace cuda_answer

}  // namespace sketchccl::backend
