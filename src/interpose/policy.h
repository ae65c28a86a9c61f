// Which ncclAllReduce and ncclReduceScatter calls SketchCCL takes over (docs/interposition.md). The
// inputs are the arguments every rank passes identically, plus the communicator's agreed state, so
// every rank takes the same path.
#pragma once

#include <nccl.h>

#include <cstddef>

#include "src/backend/memory_type.h"

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
  // Where the buffers live. mem_pending: not asked yet (CUDA is asked only once the rest says
  // "take over"; the decision then says needs_memory).
  bool mem_pending = false;
  bool mem_known = true;  // false: CUDA's query failed or the host memory is not readable
  backend::MemoryType mem = backend::MemoryType::kHost;
  bool cuda_backend = false;            // device buffers may take the device path (docs/cuda.md)
  const char* cuda_unusable = nullptr;  // why not (backend::device_path_usable), if known
  // SKETCHCCL_CODEC=auto's verdict on the measured links (coll/network_verdict.h): NCCL alone is
  // predicted fastest for host / device buffers of this call.
  bool no_gain_host = false;
  bool no_gain_device = false;
};

// Why a call is forwarded (kNone: taken over), as the per-call log names it.
enum class ForwardReason {
  kNone,
  kDisabled,   // SKETCHCCL_ENABLE=0
  kNotReady,   // no agreed SketchCCL state (no record, disagreement, failed join)
  kOneNode,    // every rank on one node (SKETCHCCL_HIERARCHY=auto): NCCL is faster there
  kOp,         // not sum or avg
  kType,       // not float32, float16 or bfloat16
  kSize,       // under SKETCHCCL_MIN_BYTES
  kCapture,    // the stream is being captured into a CUDA graph
  kMemory,     // memory that cannot be classified (any doubt forwards)
  kNoBackend,  // stream-ordered memory without a usable device path (docs/cuda.md)
  kSimulated,  // inside a group ended by ncclGroupSimulateEnd (the front decides that)
  kNoGain,     // auto: no codec is predicted faster than NCCL on these links
};

struct PolicyDecision {
  bool take_over = false;
  const char* reason = "";  // why it is forwarded, for the per-call log and tests
  ForwardReason why = ForwardReason::kNone;
  // Taken over only if the memory, asked next, allows it (mem_pending was set).
  bool needs_memory = false;
};

PolicyDecision decide(const PolicyInput& in);

}  // namespace sketchccl::interpose
