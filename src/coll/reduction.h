// A taken-over reduction as the interposer submits it to a communicator (comm.h): its kind, which
// picks the ring shape (coll_shape.h) or the hierarchy's phase (hierarchy.h), and its buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec.h"
#include "src/backend/memory_type.h"
#include "src/backend/stage_gate.h"

namespace sketchccl::coll {

// What a taken-over call is: the interposer says it once.
enum class CallKind : uint8_t {
  kAllReduce,      // every rank gets the whole reduced buffer
  kReduceScatter,  // count = P chunks of count / P; rank r gets chunk r (NCCL's layout)
  // The inter-node phase of a hierarchical AllReduce whose node phases a real NCCL runs: an
  // AllReduce of this rank's shard among the ranks of its rail (hierarchy.h runs it).
  kRail,
  // The inter-node phase of a hierarchical ReduceScatter whose node phase a real NCCL runs: a
  // ReduceScatter among the ranks of its rail of the node's sums of the rail's chunks (count: the
  // rail's N chunks), leaving this rank its own chunk (hierarchy.h).
  kRailReduceScatter,
};
// As the logs name it.
inline const char* call_kind_name(CallKind kind) {
  switch (kind) {
    case CallKind::kAllReduce:
      return "AllReduce";
    case CallKind::kReduceScatter:
      return "ReduceScatter";
    case CallKind::kRail:
      return "rail AllReduce";
    case CallKind::kRailReduceScatter:
      return "rail ReduceScatter";
  }
  return "reduction";
}

struct ReductionArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  // The input's elements; a ReduceScatter's `recv` holds this rank's count / P of them.
  size_t count = 0;
  kernels::ElemType type = kernels::ElemType::kF32;
  bool avg = false;
  bool exact = false;  // below SKETCHCCL_MIN_BYTES or SKETCHCCL_ENABLE=0 in standalone: `none`
  // Where send/recv live, classified once by the interposer. kDevice: stream-ordered memory,
  // which the communicator stages on the caller's stream (docs/cuda.md): the engine then gets the
  // staged host copies, kHost, with `staged` set.
  backend::MemoryType mem = backend::MemoryType::kHost;
  CallKind kind = CallKind::kAllReduce;
  // What the buffer's history and error feedback are kept by (null: send): a rail phase reads a
  // scratch whose address says nothing of the user's buffer, so it passes the user's sendbuff.
  const void* state_key = nullptr;
  // This call's codec, chosen by the caller (a *Config call's option), instead of the settings';
  // every rank passes the same.
  bool has_codec = false;
  kernels::CodecId codec = kernels::CodecId::kNone;
  // The host copies of a device call's buffers, staged on the caller's stream (Communicator).
  bool staged = false;
  // Where they arrive and leave in chunks (docs/cuda.md, "Chunks"): the engine asks before it
  // first reads a range of `send` and says when a range of `recv` is final. Null: whole buffers.
  backend::StageGate* gate = nullptr;
};

}  // namespace sketchccl::coll
