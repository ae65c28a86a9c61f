// Standalone mode's exact calls (exact_collectives.h) as NCCL's API describes them: NCCL's
// argument rules, the ops made by ncclRedOpCreatePreMulSum, and the submission of a validated
// call to the communicator's proxy.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "src/api/coll_call.h"
#include "src/core/status.h"
#include "src/standalone/exact_collectives.h"

namespace sketchccl::standalone {

// ncclInvalidArgument for a datatype outside ncclDataType_t.
Status exact_type(ncclDataType_t t, DType* out);
// A built-in op or one this communicator created (PreMulSum, its scalar read now).
Status exact_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t t, RedOp* out);

// The buffer of a send or receive: not NULL unless count is 0; *device: in device memory.
Status check_one_buffer(const void* buf, size_t count, DType t, bool* device);

// Whole validation and run of a collective on the exact engine (every kind but Send and Recv):
// the communicator, type, op, root, buffers (null, overlap other than NCCL's in-place layout);
// device buffers staged through host memory; run on the comm's proxy and waited for (at
// ncclGroupEnd inside a group).
ncclResult_t exact_call(const api::CollCall& call);

}  // namespace sketchccl::standalone
