// An ncclAllReduce that SketchCCL runs itself (standalone, or taken over in front of a real
// NCCL): the validation both engines share, the buffers' memory type (asked of CUDA once per
// call), and the submission to the communicator.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "kernels/codec.h"
#include "src/backend/memory_type.h"
#include "src/coll/comm.h"
#include "src/core/status.h"

namespace sketchccl::interpose {

// Where a call's two buffers live.
struct BufferMemory {
  backend::MemoryType type = backend::MemoryType::kHost;  // kDevice if either is device memory
  bool mixed = false;                                     // one device, the other host
  bool known = true;     // false: either buffer could not be classified (never taken over)
  const char* why = "";  // what made it unknown
};

// Asks CUDA about both buffers (backend/cuda_query.h): `*_bytes` is each buffer's size, whose
// first and last bytes host memory must be readable at.
BufferMemory classify_buffers(const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes);
// The size of `count` elements of `type` (saturated; an unknown type counts one byte each).
size_t nccl_bytes(ncclDataType_t type, size_t count);

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
// Unclassifiable or mixed memory is ncclInvalidArgument, device memory without a CUDA backend
// ncclInvalidUsage (standalone: nothing to forward to).
Status validate_memory(const BufferMemory& mem);

// Runs a validated call on `comm`. Device memory: enqueued on the stream, never blocks. Host
// memory: deferred to ncclGroupEnd inside a group, else waited for. `exact`: run as `none`.
ncclResult_t run_allreduce(coll::Communicator& comm, const AllReduceCall& call,
                           kernels::ElemType et, bool exact);
// The same, returning the status unreported (a launch at ncclGroupEnd reports it there).
Status start_allreduce(coll::Communicator& comm, const AllReduceCall& call, kernels::ElemType et,
                       bool exact);

}  // namespace sketchccl::interpose
