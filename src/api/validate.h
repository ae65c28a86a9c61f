// The argument rules of the calls SketchCCL compresses (AllReduce and ReduceScatter of float32,
// float16 or bfloat16 with sum or avg; AllGather of those types), the same for both fronts: one
// rule set per kind, checked before anything is queued.
#pragma once

#include "kernels/codec.h"
#include "src/api/coll_call.h"
#include "src/api/memory.h"
#include "src/core/status.h"

namespace sketchccl::api {

// The validation of `call` by its kind (rank and nranks are SketchCCL's communicator's);
// *elem is the element type the ring computes in. A kind the ring does not run is refused.
Status validate(const CollCall& call, int rank, int nranks, kernels::ElemType* elem);

// Type and op the ring runs: float32, float16 or bfloat16 with ncclSum or ncclAvg.
Status compressed_type_and_op(const CollCall& call, kernels::ElemType* elem);
// AllReduce: type, op, buffers (null, alignment, partial overlap, memory).
Status validate_all_reduce(const CollCall& call, kernels::ElemType* elem);
// ReduceScatter: type, op, buffers (null, alignment, memory, overlap): in place is NCCL's
// recvbuff == sendbuff + rank · recvcount; any other overlap is ncclInvalidArgument.
Status validate_reduce_scatter(const CollCall& call, int rank, int nranks, kernels::ElemType* elem);
// AllGather (compressed: SKETCHCCL_ALLGATHER_CODEC): float32, float16 or bfloat16, buffers
// (null, alignment, memory, overlap): in place is NCCL's sendbuff == recvbuff + rank · sendcount;
// any other overlap is ncclInvalidArgument.
Status validate_all_gather(const CollCall& call, int rank, int nranks, kernels::ElemType* elem);
// Unclassifiable or mixed memory is ncclInvalidArgument, stream-ordered memory (device or
// page-locked) without CUDA and a device ncclInvalidUsage (standalone: nothing to forward to).
Status validate_memory(const BufferMemory& mem);

}  // namespace sketchccl::api
