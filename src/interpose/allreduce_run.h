// An ncclAllReduce that SketchCCL runs itself (standalone, or taken over in front of a real
// NCCL): the validation both engines share, the buffers' memory type (asked of CUDA once per
// call), and the submission to the communicator.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "backend/memory_type.h"
#include "coll/comm.h"
#include "core/status.h"
#include "kernels/codec.h"

namespace sketchccl::interpose {

// Where a call's two buffers live.
struct BufferMemory {
  backend::MemoryType type = backend::MemoryType::kHost;  // kDevice if either is device memory
  bool mixed = false;                                     // one device, the other host
};

// Asks CUDA about both buffers (host memory without a driver or without CUDA in the build).
BufferMemory classify_buffers(const void* send, const void* recv);

struct AllReduceCall {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  cudaStream_t stream = nullptr;
  BufferMemory mem;  // classified once, by the front
};

// Type, op, buffers (null, alignment, partial overlap, mixed memory); *et is the element type.
Status validate_allreduce(const AllReduceCall& call, kernels::ElemType* et);

// Runs a validated call on `comm`. Device memory: enqueued on the stream, never blocks. Host
// memory: deferred to ncclGroupEnd inside a group, else waited for. `exact`: run as `none`.
ncclResult_t run_allreduce(coll::Communicator& comm, const AllReduceCall& call,
                           kernels::ElemType et, bool exact);

}  // namespace sketchccl::interpose
