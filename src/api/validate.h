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

// The one rule of which types and ops the compressed path takes, for the policy, the validation
// and standalone's choice of engine alike: float32, float16 and bfloat16 (*elem: the element type
// the ring computes in; false for any other type) ...
bool compressed_type(ncclDataType_t type, kernels::ElemType* elem);
// ... with sum or average (PreMulSum and every other op keep NCCL's or the exact engine's
// arithmetic) ...
bool compressed_op(ncclRedOp_t op);
// ... both.
bool compressed_eligible(ncclDataType_t type, ncclRedOp_t op);
// The rule as the validation's error: the type or op the ring does not run, named.
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
