// The emulated CUDA runtime's inside: what the kernel executor and the runtime ask of each other.
// The runtime (cudaemu/runtime/) owns streams, hardware queues, memory and hazards; the executor
// (cudaemu/exec/) runs a kernel's grid on the thread that calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace cudaemu {

// Queues `work` on `stream` (0, cudaStreamLegacy, cudaStreamPerThread or a created stream) behind
// everything CUDA orders before it; it runs on the stream's hardware-queue thread. `what` names
// the work in hazard and fault reports ("kernel k_gate_spin", "memcpy D2H").
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// A kernel's function is "loaded" by its first launch or cudaFuncGetAttributes; a first load
// under lazy loading waits for the device as a context synchronization does (a hazard in strict
// mode when a stream waits on the host).
void load_function(const void* fn, const char* name);

// Whether [p, p + n) lies inside one live device (or mapped host) allocation.
// Not so for a VMM mapping the device has no access to yet (cuMemSetAccess): that is
// device_access_denied, a device fault when touched.
bool device_range_valid(const void* p, std::size_t n);
bool device_access_denied(const void* p, std::size_t n);

// A fault inside device work (bad address, misaligned access, trap): makes the context's error
// sticky (cudaErrorIllegalAddress / cudaErrorMisalignedAddress / ...) and prints `message` with
// the stream and the work item; then throws DeviceFaultStop, which the executor catches at each
// fiber's entry (abandoning the grid) and the queue thread around each work item.
struct DeviceFaultStop {};
[[noreturn]] void device_fault(cudaError_t error, const char* message);

// Strict mode with CUDAEMU_RELEASERS=<prefix>[,<prefix>...]: aborts when the calling thread's
// name starts with one of the prefixes (it releases host waits) and some stream waits on the
// host, naming `call`. Every entry point calls it (most through api_enter).
void releaser_check(const char* call);

// The calling thread's last error, as cudaGetLastError returns (and clears) it; a launch sets it.
void set_last_error(cudaError_t error);

// Called by the executor on a queue thread while a kernel polls memory (`__nanosleep`): the
// running work item "waits on the host" until it ends or until note_device_waiting(false).
void note_device_waiting(bool waiting);

// The launch shape of one kernel.
struct LaunchShape {
  dim3 grid;
  dim3 block;
  std::size_t dynamic_shared = 0;
};

// Runs every thread of the grid (each block's threads as fibers on the calling thread, in the
// order `__syncthreads` and the warp intrinsics allow), calling `body` once per thread with the
// thread's indices set. Returns cudaErrorInvalidConfiguration for a shape CUDA refuses.
cudaError_t run_grid(const LaunchShape& shape, const char* kernel_name,
                     const std::function<void()>& body);

// The shape check `<<<>>>` does at launch, before anything is queued.
cudaError_t check_shape(const LaunchShape& shape);

}  // namespace cudaemu
