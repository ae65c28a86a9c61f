// Device buffers of standalone mode's exact calls, staged through host memory: the caller's
// stream is drained and the input copied to host at the call; the exact engine runs on the
// copies; the output goes back on the same stream once the work is done (at the call, or at
// ncclGroupEnd inside a group). The call is therefore not asynchronous on its stream.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/core/status.h"

namespace sketchccl::standalone {

class StagedBuffers {
 public:
  // `send` (read) and `recv` (written) extents of one rank, device or host memory; extents that
  // overlap (NCCL's in-place layouts) share one host copy with their offsets kept.
  static Status stage(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                      cudaStream_t stream, std::shared_ptr<StagedBuffers>* out);
  void* host_send() { return host_send_; }
  void* host_recv() { return host_recv_; }
  // Copies the host result into recv on the stream and waits for it.
  Status unstage();

 private:
  std::vector<uint8_t> a_, b_;
  void* host_send_ = nullptr;
  void* host_recv_ = nullptr;
  void* recv_ = nullptr;
  size_t recv_bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace sketchccl::standalone
