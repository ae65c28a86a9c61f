// Which ncclAllReduce calls SketchCCL takes over (docs/interposition.md). The inputs are the
// arguments every rank passes identically, plus the communicator's agreed state, so every rank
// takes the same path.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "backend/memory_type.h"

namespace sketchccl::interpose {

enum class CommState {
  kNone,      // no SketchCCL state (id without a record, SKETCHCCL_ENABLE=0 at init, shrink)
  kDisagree,  // the ranks' protocol configurations differ
  kFailed,    // the join failed (timeout, bad record): forwarded from then on
  kReady,     // joined: may take over
};

struct PolicyInput {
  bool enabled = true;  // SKETCHCCL_ENABLE
  CommState comm = CommState::kNone;
  bool one_node = false;  // every rank on one node, SKETCHCCL_HIERARCHY=auto (NCCL is faster)
  ncclRedOp_t op = ncclSum;
  ncclDataType_t type = ncclFloat32;
  size_t count = 0;
  size_t min_bytes = 1 << 20;  // SKETCHCCL_MIN_BYTES
  bool capturing = false;      // the stream is being captured into a CUDA graph
  backend::MemoryType mem = backend::MemoryType::kHost;  // where the buffers live
  bool cuda_backend = false;                             // this build can run codecs on the GPU
};

struct PolicyDecision {
  bool take_over = false;
  const char* reason = "";  // why it is forwarded, for TRACE logs and tests
};

PolicyDecision decide(const PolicyInput& in);

}  // namespace sketchccl::interpose
