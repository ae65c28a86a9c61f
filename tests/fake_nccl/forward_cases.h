// The cases of forward_client, one file per concern: every forwarded function
// (forward_functions.cc), the hierarchy's NCCL phases (forward_hierarchy.cc), the compressed
// AllGather in front of NCCL (forward_gather.cc); the program, its modes and the policy tables
// are forward_client.cc. Each case prints its CHECK lines (client_util.h).
#pragma once

#include <nccl.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "sketchccl_build_config.h"
#include "tests/fake_nccl/client_util.h"

namespace forward_client {

using fake_client::check;
using fake_client::fake_stream;
using fake_client::fmt;
using fake_client::log_since;
using fake_client::log_size;

// Threads of this process (/proc/self/task).
inline int thread_count() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Polls a nonblocking communicator until it leaves ncclInProgress, as PyTorch does after a call
// that returned it; the last answer.
inline ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 5000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return async;
}

inline bool enqueued(ncclResult_t r) {
  return r == ncclSuccess || r == ncclInProgress;
}

// Every function SketchCCL never takes over: it must reach the fake with the same arguments.
void every_forwarded_function(ncclComm_t comm, int rank);

#if SKETCHCCL_NCCL_DEVICE_API
// The device API's host functions: each arrives at the real twin with the caller's arguments,
// and its result (a code, a team, a number) comes back as the real one gave it.
void every_device_api_function(ncclComm_t comm, int rank, int nranks);
#endif

// A communicator of 2 nodes x 2 ranks (SKETCHCCL_HOSTID=node<rank / 2>, docs/hierarchy.md): its
// node communicator is split once (color: node, key: local rank): in a blocking init
// (`init_log`), else in the first taken-over AllReduce. Each such AllReduce enqueues
// ncclReduceScatter into this rank's shard of recvbuff, the compressed rail phase, and
// ncclAllGather, both on the node communicator and the caller's stream. The fake's
// ReduceScatter copies the first shard of sendbuff, so each rank's shard holds its own value
// (rank + 1) and the rail sums it over the two nodes; the fake's AllGather copies it to the
// front of recvbuff. `nonblocking`: the parent is (ncclInProgress counts as enqueued, and the
// caller waits for it to be ready after each call). Returns the node communicator, as the fake
// logged it.
std::string hierarchy_phases(ncclComm_t comm, int rank, const std::string& init_log,
                             bool nonblocking);

// A ReduceScatter on the 2 x 2 communicator: its input (chunk c for rank c) regrouped by rail into
// a copy S (positions l·N + n: the chunk of the rank at node n, local index l), NCCL's
// ReduceScatter of S in place on the node communicator (N·recvcount elements, into
// S + local·N·recvcount), then the compressed rail ReduceScatter into recvbuff, nothing else.
// The fake's ReduceScatter copies S's first N chunks (chunks 0 and 2: local index 0's rail) into
// this rank's part, so the rail's ReduceScatter leaves rank (n, l) chunk n·L summed over its rail:
// value(l, n·L) + value(L + l, n·L). Apart, in place with avg, and inside a group.
void hierarchy_reduce_scatter(ncclComm_t comm, int rank, const std::string& node_comm,
                              bool nonblocking);

// ncclAllGather of host buffers, mode gather (SKETCHCCL_ALLGATHER_CODEC from the test, or unset):
// unset, a float32 AllGather over SKETCHCCL_MIN_BYTES arrives at the fake unchanged; set, it is
// taken over (never arrives), close to the exact gather, counted in the statistics, and every
// rank prints a hash of its output (the test compares them: the same bits on every rank), and so
// is a bfloat16 one; an int32 AllGather arrives either way.
void gather_front(ncclComm_t comm, int rank, int nranks);

}  // namespace forward_client
