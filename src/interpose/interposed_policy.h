// The policy as the front applies it to one call in front of a real NCCL (AllReduce and
// ReduceScatter alike): its inputs, the memory asked last, and the per-call log's words.
#pragma once

#include <memory>
#include <string>

#include "src/coll/comm.h"
#include "src/interpose/allreduce_run.h"
#include "src/interpose/policy.h"

namespace sketchccl::interpose {

// Everything but the memory (mem_pending): CUDA is asked only if the rest says "take over".
PolicyInput policy_input(const std::shared_ptr<coll::Communicator>& c, ncclRedOp_t op,
                         ncclDataType_t type, size_t count, cudaStream_t stream);
// Decides again with the buffers' memory; unclassifiable memory is WARNed once per process.
PolicyDecision decide_with_memory(PolicyInput& in, const BufferMemory& mem);
// "taken over, codec X" (exact: `none`).
std::string taken_over_outcome(bool exact);
// "forwarded: why".
std::string forwarded_outcome(const PolicyDecision& d, const BufferMemory& mem);

}  // namespace sketchccl::interpose
