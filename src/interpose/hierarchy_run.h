// A taken-over AllReduce on a communicator of several nodes of several ranks, in front of a real
// NCCL (docs/hierarchy.md): ncclReduceScatter on the node's communicator, the gated compressed
// rail phase, ncclAllGather, all on the caller's stream.
#pragma once

#include <nccl.h>

#include "src/api/coll_call.h"
#include "src/coll/comm.h"
#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

// Whether this call takes the NCCL-phase hierarchy: an AllReduce, the communicator is
// hierarchical, the count splits into L equal shards (NCCL's ReduceScatter needs them), and the
// call is outside a group (the node communicator is split on the caller's thread, which a group
// would join). Agreed inputs only, given the same group structure on every rank.
bool takes_nccl_phases(const coll::Communicator& c, const api::CollCall& call);

// Runs a validated call: the node communicator is split from call.comm at the first such call
// (every rank reaches it at the same point of its calls on it), then the three phases are
// enqueued.
ncclResult_t run_nccl_phases(const RealApi& real, coll::Communicator& c, const api::CollCall& call);

// ncclCommDestroy / ncclCommAbort of `comm`: destroys (or aborts) its node communicator.
void drop_node_comm(const RealApi& real, ncclComm_t comm, bool abort);

}  // namespace sketchccl::interpose
