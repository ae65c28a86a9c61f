// The per-call log, as NCCL's "AllReduce: opCount ..." lines: at SKETCHCCL_DEBUG=INFO with the
// COLL subsystem (SKETCHCCL_DEBUG_SUBSYS), one line per collective with its arguments and what
// SketchCCL did with it (taken over with which codec, or forwarded and why).
#pragma once

#include <nccl.h>

#include <cstddef>

namespace sketchccl::interpose {

struct CallRecord {
  const char* name = "";  // NCCL's spelling: "AllReduce", "ReduceScatter", "Broadcast", ...
  const void* send = nullptr;
  const void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int op = -1;    // -1: the collective has none
  int root = -1;  // -1: none (printed as 0, as NCCL does)
  ncclComm_t comm = nullptr;
  int nranks = 0;  // 0: unknown to SketchCCL (asked of the real NCCL when the line is printed)
  cudaStream_t stream = nullptr;
};

// Whether the lines are printed (INFO and COLL): callers skip building them otherwise.
bool call_log_enabled();
// Prints the line: `outcome` says what happened ("taken over, codec q8", "forwarded: ...").
// `count_real` (may be null) is the real ncclCommCount, for communicators without SketchCCL
// state.
void log_call(const CallRecord& call, const char* outcome,
              ncclResult_t (*count_real)(const ncclComm_t, int*));

}  // namespace sketchccl::interpose
