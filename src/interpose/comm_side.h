// SketchCCL's side of a communicator in front of a real NCCL: created beside the real one (keyed
// by its handle in the side table) when the id carries a SketchCCL record, and the caller's
// configuration read as NCCL reads it.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

// Starts SketchCCL's side of the real communicator `real` (made from the 128-byte id `id`):
// nothing when SketchCCL is disabled, the id has no record, or the configuration is bad. Never
// waits: the join runs on the communicator's proxy.
void attach(const RealApi& api, ncclComm_t real, const uint8_t* id, int rank, int nranks,
            bool nonblocking);

// Whether a communicator made with `config` is nonblocking: its blocking field when set, else
// NCCL_COMM_BLOCKING, else `inherited` (a split with a NULL config inherits its parent's).
bool config_nonblocking(const ncclConfig_t* config, bool inherited);
// NCCL_COMM_BLOCKING=0: communicators without a blocking field are nonblocking.
bool nonblocking_by_default();

}  // namespace sketchccl::interpose
