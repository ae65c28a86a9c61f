// Questions the interposer asks CUDA about a call's arguments. CUDA is never loaded or
// initialised here: the runtime in a CUDA build, else the driver the process already loaded.
#pragma once

#include <cstddef>

namespace sketchccl::backend {

// Where a buffer lives, as far as SketchCCL can tell; any doubt is kUnknown, which forwards.
enum class MemoryClass {
  kHost,     // CUDA said unregistered or host memory (or no CUDA driver is loaded), and readable
  kDevice,   // CUDA said device or managed memory
  kPinned,   // CUDA said page-locked host memory (cudaHostAlloc, cudaHostRegister): stream-ordered
  kUnknown,  // CUDA's query failed, or host memory that cannot be read (a device reservation)
};

struct MemoryQuery {
  MemoryClass cls = MemoryClass::kUnknown;
  const char* why = "";  // for kUnknown: what failed (a static string)
};

// Classifies the `bytes` bytes at `p` (a null pointer or no bytes: host). Host memory is checked
// readable at its first and last byte without touching it (a fault is an answer, not a signal).
MemoryQuery classify_memory(const void* p, size_t bytes);
// True when p is device (or managed) memory.
bool is_device_pointer(const void* p);
// Whether `stream` (a cudaStream_t) is being captured into a CUDA graph; kUnknown when CUDA's
// query failed.
enum class CaptureState { kNone, kCapturing, kUnknown };
// True when `stream` is being captured, or when that could not be asked (any doubt forwards).
bool stream_is_capturing(void* stream);
// True when this build has CUDA and the process a device.
bool has_cuda_backend();
// Whether device buffers may take SketchCCL's device path (docs/cuda.md, "When device buffers
// are forwarded"): a CUDA build with a device (above) and a driver at least as new as the runtime
// this library was built with. Otherwise *reason (a static string) says why, logged once (WARN for
// an old driver), and the interposer forwards device buffers to the real NCCL.
bool device_path_usable(const char** reason = nullptr);
// The calling thread's current device (cudaGetDevice); 0 without CUDA or a device.
int current_cuda_device();

}  // namespace sketchccl::backend
