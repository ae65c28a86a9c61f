// ncclSend/ncclRecv in standalone mode. Outside a group a call runs alone; inside one, each
// communicator's sends and receives are collected and submitted together at the outermost
// ncclGroupEnd (after the group's collectives), so that exchanges between ranks cannot deadlock.
#pragma once

#include <nccl.h>

#include "src/api/coll_call.h"

namespace sketchccl::standalone {

// One ncclSend or ncclRecv (call.root is the peer).
ncclResult_t p2p_call(const api::CollCall& call);

}  // namespace sketchccl::standalone
