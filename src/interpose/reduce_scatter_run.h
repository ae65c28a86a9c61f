// An ncclReduceScatter that SketchCCL runs itself (standalone, or taken over in front of a real
// NCCL): the validation both engines share and the submission to the communicator. The ring and
// the codecs are AllReduce's (coll/reduce_scatter.h).
#pragma once

#include <nccl.h>

#include <cstddef>

#include "kernels/codec.h"
#include "src/coll/comm.h"
#include "src/core/status.h"
#include "src/interpose/allreduce_run.h"

namespace sketchccl::interpose {

struct ReduceScatterCall {
  const void* send = nullptr;  // nranks · recvcount elements
  void* recv = nullptr;        // recvcount elements
  size_t recvcount = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  cudaStream_t stream = nullptr;
  BufferMemory mem;  // classified once, by the front
  int rank = 0;
  int nranks = 1;
};

// Type, op, buffers (null, alignment, mixed memory, overlap): in place is NCCL's
// recvbuff == sendbuff + rank · recvcount; any other overlap is ncclInvalidArgument.
Status validate_reduce_scatter(const ReduceScatterCall& call, kernels::ElemType* et);

// Runs a validated call on `comm`, as run_allreduce does (stream, group, wait). `exact`: `none`.
ncclResult_t run_reduce_scatter(coll::Communicator& comm, const ReduceScatterCall& call,
                                kernels::ElemType et, bool exact);
// The same, returning the status unreported (a launch at ncclGroupEnd reports it there).
Status start_reduce_scatter(coll::Communicator& comm, const ReduceScatterCall& call,
                            kernels::ElemType et, bool exact);

}  // namespace sketchccl::interpose
