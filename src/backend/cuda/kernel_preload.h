// Loads every kernel instantiation (each .cu file lists its own: kernels/cuda/codec_cuda.h,
// backend/cuda/gate_kernels.h) on a device and sizes the
// per-thread stack for the largest of them, once per device and process. Called on the caller's
// thread when a CUDA backend or stream gate is created, before any stream is held: a lazy module
// load or a stack resize at a kernel's first launch may synchronize the context (docs/cuda.md).
#pragma once

#include <cstddef>

#include "src/core/status.h"

namespace sketchccl::backend {

struct PreloadReport {
  size_t max_local_bytes = 0;  // the largest per-thread local memory (stack) among them
  size_t stack_limit = 0;      // cudaLimitStackSize afterwards
};

// `device` must be current on the calling thread. The first call for a device does the work;
// later ones return its outcome. kUnhandledCudaError names the kernel that failed to load (for
// example, no image for this device's architecture).
Status preload_kernels(int device, PreloadReport* report = nullptr);

}  // namespace sketchccl::backend
