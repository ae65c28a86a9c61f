// The CUDA backend (docs/cuda.md): a Backend whose user buffers (x, y) are device memory of one
// device and whose packets, bitmaps and sparse value arrays are host memory, as the ring hands
// them to the transport. Codec kernels (kernels/cuda/codec_cuda.h) run on the backend's own
// non-blocking, highest-priority streams (a main stream and four lane streams); packets live in
// a pinned arena (alloc_packets), so copies to and from them do not make the host wait. Every
// kernel is loaded and warmed up when the backend is made; every wait polls, bounded by
// bound_waits' timeout and abort flag. encode_start/step_start queue their work and return a ticket
// that test() polls; decode and the other calls return with their results in place.
//
// Used by the proxy thread of one communicator, except reserve_packet_memory (the caller's
// thread, before its stream is gated). coll reaches it through backend.h's make_backend; this
// header is for src/backend and the GPU tests. No CUDA type appears here.
#pragma once

#include <memory>

#include "src/backend/backend.h"
#include "src/core/status.h"

namespace sketchccl::backend {

class CudaBackend : public Backend {
 public:
  virtual int device() const = 0;
};

// kUnhandledCudaError (with the reason) without CUDA in the build or without the device.
Status make_cuda_backend(int device, std::unique_ptr<CudaBackend>* out);

}  // namespace sketchccl::backend
