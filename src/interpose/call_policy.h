// The policy (policy.h) as the front applies it to one call in front of a real NCCL, AllReduce
// and ReduceScatter alike: the wait for the communicator's join, the inputs, the memory asked
// last, and the per-call log's words.
#pragma once

#include <memory>
#include <string>

#include "src/api/coll_call.h"
#include "src/coll/comm.h"
#include "src/interpose/policy.h"

namespace sketchccl::interpose {

// The communicator's agreed state. Waits, sleeping on the caller's thread for at most
// `timeout_s`, while its join is still running: the first call after init then sees the same
// state on every rank.
CommState wait_for_join(coll::Communicator* c, double timeout_s);

// The policy's inputs for `call` on `c` in state `state` (no waiting here), on the call's input
// size, everything but the memory (mem_pending): CUDA is asked only once the rest says "take
// over".
PolicyInput policy_input(const coll::Communicator* c, CommState state, const api::CollCall& call);
// Decides again with the buffers' memory; unclassifiable memory is WARNed once per process.
PolicyDecision decide_with_memory(PolicyInput& in, const api::BufferMemory& mem);
// "taken over, codec X" (an AllGather's: its codec).
std::string taken_over_outcome(const api::CollCall& call);
// "forwarded: why".
std::string forwarded_outcome(const PolicyDecision& d, const api::BufferMemory& mem);

}  // namespace sketchccl::interpose
