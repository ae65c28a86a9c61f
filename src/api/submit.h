// A validated call SketchCCL runs itself, handed to its communicator: the one conversion from
// the NCCL call to the engine's own descriptor (coll knows no NCCL types), and the submission.
#pragma once

#include "src/api/coll_call.h"
#include "src/coll/comm.h"
#include "src/coll/reduction_engine.h"
#include "src/core/status.h"

namespace sketchccl::api {

// How the engine runs it: with the configured codec, exact (`none`: standalone below
// SKETCHCCL_MIN_BYTES or with SKETCHCCL_ENABLE=0), or as the hierarchy's rail phase (in front of
// a real NCCL, which runs the node phases around it: docs/hierarchy.md).
enum class EngineRun { kCodec, kExact, kRail };

// The engine's descriptor of `call` on a communicator of `nranks` (a rail phase: the rail's, one
// rank per node). The only place that builds a coll::ReductionArgs.
coll::ReductionArgs engine_args(const CollCall& call, int nranks, EngineRun run);

// Runs `call` (validated, its memory classified) on `comm`. Device memory: enqueued on the
// call's stream, never blocks (a later failure is the communicator's async error). Host memory:
// deferred to ncclGroupEnd inside a group, else waited for. *started (optional): the call runs
// (with the other ranks) even if an error is returned; false: nothing of it runs, and in front of
// NCCL it may be forwarded.
Status submit(coll::Communicator& comm, const CollCall& call, EngineRun run,
              bool* started = nullptr);

// Runs the AllGather `call` (validated, its memory classified) compressed with `codec` (a linear
// codec, coll/allgather.h) on `comm`. Device memory (in front of NCCL): staged on the call's
// stream as submit stages a reduction, never blocks. Host memory: deferred to ncclGroupEnd inside
// a group, else waited for. *started: as submit's.
Status submit_gather(coll::Communicator& comm, const CollCall& call, kernels::CodecId codec,
                     bool* started = nullptr);

}  // namespace sketchccl::api
