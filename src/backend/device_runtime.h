// What SketchCCL asks of the device (docs/cuda.md, "The stream gate"): the caller's context at
// init and at each call (its current device, where a buffer lives, whether its stream captures,
// whether the device path can run: cuda_query.h answers through here), the gate, the device
// backend, draining a caller's stream, and how device calls are ordered in this process. The CUDA
// runtime answers in a CUDA build; a test installs a host model of the device instead, so that
// the gate's protocol and the device path's setup run on a CPU under what the hardware does.
#pragma once

#include <memory>
#include <string>

#include "src/backend/backend.h"
#include "src/backend/cuda_query.h"
#include "src/backend/stream_gate.h"
#include "src/core/status.h"

namespace sketchccl::backend {

enum class StreamMode {
  // Marker and wait on the caller's stream; the caller's thread returns at once.
  kGated,
  // No gate: the caller's thread drains its stream, runs the operation and returns when it is
  // done (a launch that waits for its kernel, or one hardware queue, would deadlock the gate).
  kSynchronous,
};

// What decides the mode, read from the environment once (stream_env_from_environment).
struct StreamEnv {
  bool launch_blocking = false;  // CUDA_LAUNCH_BLOCKING=1
  bool injection_tool = false;   // CUDA_INJECTION64_PATH set (compute-sanitizer, ncu, nsys)
  long max_connections = 8;      // CUDA_DEVICE_MAX_CONNECTIONS (CUDA's default 8)
};
StreamEnv stream_env_from_environment();

// The mode for `env`; *why names the reason when synchronous. In front of a real NCCL one hardware
// queue forwards device buffers before any of this is asked (cuda_query.h).
StreamMode stream_mode(const StreamEnv& env, std::string* why);

// CUDA's own answers (cuda_query.cc): the runtime in a CUDA build, else the driver the process
// already loaded. DeviceRuntime's defaults.
namespace cuda_answer {
int current_device();                       // cudaGetDevice; 0 without a device
MemoryQuery pointer_memory(const void* p);  // kHost: not memory CUDA knows (unchecked readable)
bool stream_capturing(void* stream);
bool has_backend();
bool device_path_usable(const char** reason);
}  // namespace cuda_answer

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // The caller's context, asked on the caller's thread (the meaning of cuda_query.h's functions).
  virtual int current_device() { return cuda_answer::current_device(); }
  virtual MemoryQuery pointer_memory(const void* p) { return cuda_answer::pointer_memory(p); }
  virtual bool stream_capturing(void* stream) { return cuda_answer::stream_capturing(stream); }
  virtual bool has_backend() { return cuda_answer::has_backend(); }
  virtual bool device_path_usable(const char** reason) {
    return cuda_answer::device_path_usable(reason);
  }
  virtual Status make_gate(int device, std::unique_ptr<StreamGate>* out) = 0;
  virtual Status make_backend(int device, std::unique_ptr<Backend>* out) = 0;
  // Caller's thread: returns once the work queued so far on `stream` (nullptr: the default
  // stream) has finished; kRemoteError past timeout_s.
  virtual Status synchronize(int device, void* stream, double timeout_s) = 0;
  // Caller's thread: `bytes` of device memory of `device` from SketchCCL's own pool (never the
  // application's), ready for the work queued on `stream` after this call; nothing is waited for.
  virtual Status alloc_on_stream(int device, size_t bytes, void* stream, void** out) {
    (void)device, (void)bytes, (void)stream, (void)out;
    return Status(Code::kUnhandledCudaError, "no stream-ordered device memory");
  }
  // Caller's thread: `p` (alloc_on_stream's) goes back to the pool once the work queued so far on
  // `stream` has finished.
  virtual Status free_on_stream(int device, void* p, void* stream) {
    (void)device, (void)p, (void)stream;
    return Status(Code::kUnhandledCudaError, "no stream-ordered device memory");
  }
  virtual StreamMode mode(std::string* why) = 0;
};

// Makes the calling thread's stream-capture mode relaxed for the scope, then restores it: a graph
// another thread captures in global mode is then not invalidated by this thread's CUDA calls
// (event queries, pinned allocations), which global mode forbids during a capture. No-op without
// CUDA.
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

}  // namespace sketchccl::backend
