// The per-call log, as NCCL's "AllReduce: opCount ..." lines: at SKETCHCCL_DEBUG=INFO with the
// COLL subsystem (SKETCHCCL_DEBUG_SUBSYS), one line per collective with its arguments and what
// SketchCCL did with it (taken over with which codec, or forwarded and why).
#pragma once

#include <nccl.h>

#include "src/api/coll_call.h"

namespace sketchccl::api {

// Whether the lines are printed (INFO and COLL): callers skip building them otherwise.
bool call_log_enabled();
// Prints the line of `call`: `outcome` says what happened ("taken over, codec q8",
// "forwarded: ..."). `nranks` 0: SketchCCL does not know the communicator, and `count_real` (may
// be null; the real ncclCommCount) is asked.
void log_call(const CollCall& call, int nranks, const char* outcome,
              ncclResult_t (*count_real)(const ncclComm_t, int*));

}  // namespace sketchccl::api
