// Host staging of device buffers for standalone mode's exact calls (src/standalone/staging.{h,cc}):
// the caller's stream is drained, device bytes are copied to host memory, the exact engine runs
// there, and the results go back on the same stream. Without CUDA every call fails.
#pragma once

#include <cstddef>

#include "src/core/status.h"

namespace sketchccl::backend {

// Waits for the work queued on `stream` (a cudaStream_t), then copies `bytes` from device `src`
// to host `dst`.
Status stage_to_host(void* dst, const void* src, size_t bytes, void* stream);
// Copies `bytes` from host `src` to device `dst` on `stream` and waits for it.
Status stage_to_device(void* dst, const void* src, size_t bytes, void* stream);

// ncclMemAlloc/ncclMemFree with CUDA and a device: device memory of the current device.
Status device_alloc(void** ptr, size_t bytes);
Status device_free(void* ptr);

}  // namespace sketchccl::backend
