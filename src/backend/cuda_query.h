// Questions the interposer asks CUDA about a call's arguments. Without a driver (or without
// CUDA in the build) the answers are "host memory" and "not capturing".
#pragma once

namespace sketchccl::backend {

// True when p is device (or managed) memory.
bool is_device_pointer(const void* p);
// True when `stream` (a cudaStream_t) is being captured into a CUDA graph.
bool stream_is_capturing(void* stream);
// True when this build has a CUDA backend that can run the codecs on device buffers.
bool has_cuda_backend();
// Whether device buffers may take SketchCCL's device path (docs/cuda.md, "When device buffers
// are forwarded"): a CUDA backend (above), a driver at least as new as the runtime this library
// was built with, and CUDA_DEVICE_MAX_CONNECTIONS unset or above 1. Otherwise *reason (a static
// string) says why, logged once (WARN for an old driver or one hardware queue), and the
// interposer forwards device buffers to the real NCCL.
bool device_path_usable(const char** reason = nullptr);
// The rule for CUDA_DEVICE_MAX_CONNECTIONS alone (`value` as in the environment, null: unset):
// true when the device path may run.
bool max_connections_allow_device_path(const char* value);
// The calling thread's current device (cudaGetDevice); 0 without a CUDA backend.
int current_cuda_device();

}  // namespace sketchccl::backend
