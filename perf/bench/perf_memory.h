// Where sketchccl-perf's buffers live. Host memory here; device memory through the CUDA runtime,
// loaded at run time (for the real NCCL on a GPU machine; not exercised on the CPU-only machines
// of CI).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <memory>

namespace perfbench {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual cudaStream_t stream() = 0;
  virtual void sync() = 0;
  virtual const char* name() const = 0;
};

// Rank `rank`'s buffers: on the device (local rank `local_rank`'s GPU, of those visible) or in
// host memory.
std::unique_ptr<Memory> make_memory(bool device, int rank, int local_rank);

// An allocation of this tool that failed: an error (exit status 3), not an abort.
[[noreturn]] void out_of_memory(int rank, const char* what, size_t bytes);

}  // namespace perfbench
