// What SketchCCL asks of the device (docs/cuda.md): the caller's context at init and at each call
// (its current device, where a buffer lives, whether its stream captures, whether the device path
// can run: cuda_query.h answers through here), and the few stream operations a staged device call
// enqueues on the caller's stream (device_staging.h): copies between the user's buffers and pinned
// staging memory, and writes and waits of host flags. Every call here is made on the caller's
// thread; the proxy never calls it. The CUDA runtime answers in a CUDA build
// (src/backend/cuda/cuda_runtime.cc); a test installs a host model of the device instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/codec.h"
#include "src/backend/cuda_query.h"
#include "src/core/status.h"

namespace sketchccl::backend {

// CUDA's own answers (cuda_query.cc): the runtime in a CUDA build, else the driver the process
// already loaded. DeviceRuntime's defaults.
namespace cuda_answer {
int current_device();                       // cudaGetDevice; 0 without a device
MemoryQuery pointer_memory(const void* p);  // kHost: not memory CUDA knows (unchecked readable)
CaptureState stream_capture(void* stream);
bool has_backend();
bool device_path_usable(const char** reason);
}  // namespace cuda_answer

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // The caller's context, asked on the caller's thread (the meaning of cuda_query.h's functions).
  virtual int current_device() { return cuda_answer::current_device(); }
  virtual MemoryQuery pointer_memory(const void* p) { return cuda_answer::pointer_memory(p); }
  virtual CaptureState stream_capture(void* stream) { return cuda_answer::stream_capture(stream); }
  virtual bool has_backend() { return cuda_answer::has_backend(); }
  virtual bool device_path_usable(const char** reason) {
    return cuda_answer::device_path_usable(reason);
  }

  // Makes the stream operations below ready for `device` (flag kernels loaded where the driver
  // has no stream memory operations), once per device; *how names the flag mechanism.
  virtual Status prepare(int device, std::string* how) = 0;
  // Pinned host memory the device reaches (mapped, portable), for staging and flags: `bytes`, 64-
  // byte aligned, or null when there is none. Caller's thread, never while a call of this
  // communicator needs it.
  virtual void* alloc_staging(int device, size_t bytes) = 0;
  virtual void free_staging(int device, void* p) = 0;
  // Enqueues on `stream` (nullptr: the default stream) a copy of `bytes` from `src` to `dst`, any
  // of them device or staging memory.
  virtual Status copy_async(int device, void* dst, const void* src, size_t bytes, void* stream) = 0;
  // Enqueues on `stream`: *flag = value once the work queued before it is done (and visible to the
  // host); `flag` is a word of alloc_staging memory.
  virtual Status write_flag(int device, uint32_t* flag, uint32_t value, void* stream) = 0;
  // Enqueues on `stream`: the work queued after it waits until *flag == value (the host writes it).
  virtual Status wait_flag(int device, const uint32_t* flag, uint32_t value, void* stream) = 0;

  // `bytes` of device memory of `device` from SketchCCL's own pool (never the application's),
  // ready for the work queued on `stream` after this call; nothing is waited for.
  virtual Status alloc_on_stream(int device, size_t bytes, void* stream, void** out) {
    (void)device, (void)bytes, (void)stream, (void)out;
    return Status(Code::kUnhandledCudaError, "no stream-ordered device memory");
  }
  // `p` (alloc_on_stream's) goes back to the pool once the work queued so far on `stream` is done.
  virtual Status free_on_stream(int device, void* p, void* stream) {
    (void)device, (void)p, (void)stream;
    return Status(Code::kUnhandledCudaError, "no stream-ordered device memory");
  }
  // The codec kernels on `stream` (kernels/cuda/codec_cuda.h), for the device path's second rung
  // (src/coll/device_ring.h): packets and `ws` in alloc_staging memory, `x` and `y` the user's
  // buffers. The call number is the word at `call` (alloc_staging memory the proxy writes before
  // the stream reaches the launch), not p.call; linear codecs only. step rewrites `pkt` in place
  // (the received partial sum plus x). prepare_codecs loads every codec kernel on `device` first,
  // on the caller's thread before any stream waits (a kernel's first load may synchronize the
  // context). The defaults have no kernels: every call takes the first rung.
  virtual Status prepare_codecs(int device) {
    (void)device;
    return Status(Code::kUnhandledCudaError, "no codec kernels on this device runtime");
  }
  virtual size_t codec_workspace_bytes(const kernels::CodecParams& p, size_t n) {
    (void)p, (void)n;
    return 0;
  }
  virtual Status encode_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                                  const void* x, kernels::ElemType t, size_t n, void* pkt,
                                  size_t cap, void* ws, size_t ws_bytes, void* stream) {
    (void)device, (void)p, (void)call, (void)x, (void)t, (void)n, (void)pkt, (void)cap, (void)ws,
        (void)ws_bytes, (void)stream;
    return Status(Code::kUnhandledCudaError, "no codec kernels on this device runtime");
  }
  virtual Status step_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                                const void* x, kernels::ElemType t, size_t n, void* pkt,
                                size_t bytes, void* ws, size_t ws_bytes, void* stream) {
    (void)device, (void)p, (void)call, (void)x, (void)t, (void)n, (void)pkt, (void)bytes, (void)ws,
        (void)ws_bytes, (void)stream;
    return Status(Code::kUnhandledCudaError, "no codec kernels on this device runtime");
  }
  virtual Status decode_on_stream(int device, const kernels::CodecParams& p, const uint64_t* call,
                                  const void* pkt, size_t bytes, void* y, kernels::ElemType t,
                                  size_t n, float scale, void* ws, size_t ws_bytes, void* stream) {
    (void)device, (void)p, (void)call, (void)pkt, (void)bytes, (void)y, (void)t, (void)n,
        (void)scale, (void)ws, (void)ws_bytes, (void)stream;
    return Status(Code::kUnhandledCudaError, "no codec kernels on this device runtime");
  }

  // How many calls of this runtime were made on a thread marked as a proxy (ProxyThreadMark):
  // zero by design (docs/cuda.md, "What the proxy never does"), counted in the statistics.
  uint64_t proxy_calls() const;

 protected:
  // Every entry point of an implementation calls it first.
  void count_call();
};

// Marks the calling thread as a communicator's proxy for its lifetime (comm.cc): a DeviceRuntime
// call made on it is counted (proxy_calls) and logged.
class ProxyThreadMark {
 public:
  ProxyThreadMark();
  ~ProxyThreadMark();
  ProxyThreadMark(const ProxyThreadMark&) = delete;
  ProxyThreadMark& operator=(const ProxyThreadMark&) = delete;
};

// Makes the calling thread's stream-capture mode relaxed for the scope, then restores it: a graph
// another thread captures in global mode is then not invalidated by this thread's CUDA calls
// (pinned allocations), which global mode forbids during a capture. No-op without CUDA.
class RelaxedCaptureScope {
 public:
  RelaxedCaptureScope();
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
  RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

 private:
  int prev_ = -1;  // the previous cudaStreamCaptureMode, -1 when it could not be exchanged
};

// The process's device runtime: the test's model when one is installed, else CUDA's (whose calls
// fail with kUnhandledCudaError without CUDA in the build or without the device).
DeviceRuntime& device_runtime();
// Tests: replaces the CUDA runtime with `model` (nullptr restores it). Not thread-safe against
// calls in flight.
void set_device_runtime_for_test(DeviceRuntime* model);
// The CUDA runtime (src/backend/cuda/cuda_runtime.cc; every call fails without CUDA).
DeviceRuntime& cuda_device_runtime();
// Tests: the CUDA runtime's flags by one-thread kernels even where the driver has stream memory
// operations (for devices prepared after the call).
void use_flag_kernels_for_test(bool on);

}  // namespace sketchccl::backend
