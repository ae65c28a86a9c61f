// What the engine asks of a device call staged in chunks (docs/cuda.md, "Chunks"): the caller's
// stream copies the input into pinned memory chunk by chunk and copies each chunk of the result
// back once the engine says it is final, so copy-out, codec, wire and copy-back of different
// chunks overlap. Implemented by backend::StagedCall; called on the proxy only, never a CUDA
// call: host flags polled and written.
#pragma once

#include <cstddef>

#include "src/core/status.h"

namespace sketchccl::backend {

class StageGate {
 public:
  // Before the engine first reads bytes [begin, end) of the staged input: returns once the stream
  // has copied every chunk they touch; kRemoteError past SKETCHCCL_TIMEOUT or on the abort flag.
  virtual Status need_input(size_t begin, size_t end) = 0;
  // Bytes [begin, end) of the staged output are final (nothing of the call writes them again):
  // a chunk whose every byte is final is released to the stream's copy back.
  virtual void output_final(size_t begin, size_t end) = 0;

 protected:
  ~StageGate() = default;
};

}  // namespace sketchccl::backend
