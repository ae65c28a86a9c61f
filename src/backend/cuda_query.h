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
// The calling thread's current device (cudaGetDevice); 0 without a CUDA backend.
int current_cuda_device();

}  // namespace sketchccl::backend
