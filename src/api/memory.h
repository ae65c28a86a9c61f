// Where a call's buffers live (host or device memory), asked of CUDA once per call
// (backend/cuda_query.h), for the policy, the validation and the run alike.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "src/backend/memory_type.h"

namespace sketchccl::api {

struct CollCall;

// Where a call's two buffers live.
struct BufferMemory {
  backend::MemoryType type = backend::MemoryType::kHost;  // kDevice if either is device memory
  bool mixed = false;                                     // one device, the other host
  bool known = true;     // false: either buffer could not be classified (never taken over)
  const char* why = "";  // what made it unknown
};

// Asks CUDA about both buffers: `*_bytes` is each buffer's size, whose first and last bytes host
// memory must be readable at.
BufferMemory classify_buffers(const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes);
// The same for a call's input and output (coll_call.h's input_count, output_count) on `nranks`.
BufferMemory classify(const CollCall& call, int nranks);
// The size of `count` elements of `type` (saturated; an unknown type counts one byte each).
size_t nccl_bytes(ncclDataType_t type, size_t count);

}  // namespace sketchccl::api
