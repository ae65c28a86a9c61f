// The front of standalone mode's exact operations (coll/collectives.h): NCCL's argument rules,
// the ops made by ncclRedOpCreatePreMulSum, and the submission of a validated call.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "src/coll/collectives.h"
#include "src/coll/comm.h"
#include "src/core/status.h"

namespace sketchccl::interpose {

// ncclInvalidArgument for a datatype outside ncclDataType_t.
Status exact_type(ncclDataType_t t, coll::DType* out);
// A built-in op or one this communicator created (PreMulSum, its scalar read now).
Status exact_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t t, coll::RedOp* out);
// Float32, float16 or bfloat16 with sum or avg: the calls the compressed engine runs.
bool compressed_eligible(ncclDataType_t t, ncclRedOp_t op);

// The buffer of a send or receive: not NULL unless count is 0; *device: in device memory.
Status check_one_buffer(const void* buf, size_t count, coll::DType t, bool* device);

// Checks the buffers of a validated call (null, overlap other than NCCL's in-place layout),
// stages device buffers through host memory, runs it on the comm's proxy and waits (at
// ncclGroupEnd inside a group).
ncclResult_t run_exact(ncclComm_t comm, const coll::CollArgs& args, cudaStream_t stream,
                       const char* api);

// Whole validation and run of a call, from the NCCL arguments.
ncclResult_t exact_call(coll::CollKind kind, const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream, const char* api);

}  // namespace sketchccl::interpose
