// The exact collectives of standalone mode (docs/engine.md): every NCCL collective for every
// data type and op, on host memory, over the communicator's transport (coll/p2p.h), on its proxy
// thread. Reductions run in one fixed order per element on every rank (a ring reduce-scatter:
// chunk c starts at rank c + 1 and ends at rank c), so every rank that receives a result receives
// the same bits.
#pragma once

#include <cstddef>
#include <vector>

#include "src/coll/p2p.h"
#include "src/core/status.h"
#include "src/standalone/reduce_op.h"

namespace sketchccl::standalone {

enum class ExactKind {
  kAllReduce,
  kReduce,
  kBroadcast,
  kReduceScatter,
  kAllGather,
  kAlltoAll,
  kGather,
  kScatter,
};

// count as NCCL's call names it: AllReduce, Reduce, Broadcast: the buffer's elements;
// ReduceScatter: recvcount; AllGather: sendcount; AlltoAll, Gather, Scatter: elements per rank.
// Buffers are host memory, validated by the caller (NCCL's rules, in-place layouts included).
struct ExactArgs {
  ExactKind kind = ExactKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType type = DType::kF32;
  RedOp op;
  int root = 0;
};

Status run_collective(const coll::PeerLink& link, const ExactArgs& args);

// One ncclSend or ncclRecv of a group.
struct P2POp {
  bool send = true;
  int peer = 0;
  void* buf = nullptr;  // const for a send
  size_t bytes = 0;
};

// A group's sends and receives, all posted together: the k-th send from a to b matches the k-th
// receive at b from a (NCCL's order); a rank's sends to itself match its receives from itself.
Status run_p2p(const coll::PeerLink& link, const std::vector<P2POp>& ops);

}  // namespace sketchccl::standalone
