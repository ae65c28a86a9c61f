// A taken-over AllReduce on a communicator of several nodes of several ranks, in front of a real
// NCCL (docs/hierarchy.md): ncclReduceScatter on the node's communicator, the compressed rail
// phase staged behind it, ncclAllGather, all on the caller's stream. A taken-over ReduceScatter of
// host buffers: the input regrouped by rail, ncclReduceScatter of it on the node's communicator,
// the compressed rail ReduceScatter into recvbuff; of device buffers (each node's ranks
// consecutive): one ncclReduceScatter per node in one real group into a stream-ordered device
// scratch, then the rail ReduceScatter staged from it. A compressed AllGather of device buffers
// (each node's ranks consecutive): the rail's compressed gather staged into a device scratch, then
// one ncclAllGather per node in one real group from it into recvbuff (docs/allgather.md).
#pragma once

#include <nccl.h>

#include "src/api/coll_call.h"
#include "src/coll/comm.h"
#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

// Whether this call takes the NCCL-phase hierarchy: an AllReduce, a ReduceScatter (of device
// buffers only where each node's ranks are consecutive) or a compressed AllGather (of device
// buffers where each node's ranks are consecutive), the communicator is hierarchical (and
// its node split did not fail). Inside a group the
// phases run at its outermost end, after the real group (src/api/group.h): NCCL launches a
// group's calls only there, and the rail's staging copy must follow phase 1's real kernel. Agreed
// inputs only, given the same group structure on every rank.
bool takes_nccl_phases(const coll::Communicator& c, const api::CollCall& call);
// The elements past the largest multiple of L (NCCL's ReduceScatter needs L equal shards): an
// exact NCCL AllReduce on the parent, after the phases.
size_t nccl_phases_tail(const coll::Communicator& c, const api::CollCall& call);

// After a blocking init of `comm` returned ncclSuccess: once SketchCCL's join says the
// communicator is hierarchical, its node communicator is split here, on the caller's thread,
// before the init returns. Inside a group, NCCL runs the init at the group's end: the split
// waits for node_comms_at_group_end. Nonblocking communicators get theirs at their first
// hierarchical call (NCCL refuses any use of one before its caller has seen it ready).
void node_comm_at_init(const RealApi& real, ncclComm_t comm);
// The outermost ncclGroupEnd, after the real one succeeded: the node splits of the group's inits.
void node_comms_at_group_end(const RealApi& real);
// An ncclGroupEnd that failed: the group's inits get no node split at init.
void forget_grouped_inits();

// Runs a validated call: its phases are enqueued (the node communicator split first if
// the communicator has none yet). Once phase 1 is enqueued, phase 3 is enqueued whatever
// happens to phase 2 (the node's peers wait for it), and ncclInProgress counts as enqueued.
ncclResult_t run_nccl_phases(const RealApi& real, coll::Communicator& c, const api::CollCall& call);

// ncclCommDestroy / ncclCommAbort of `comm`: destroys (or aborts) its node communicator.
void drop_node_comm(const RealApi& real, ncclComm_t comm, bool abort);

}  // namespace sketchccl::interpose
