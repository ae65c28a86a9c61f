// SketchCCL's side of a communicator in front of a real NCCL: created beside the real one (keyed
// by its handle in the side table) when the id carries a SketchCCL record, and the caller's
// configuration read as NCCL reads it.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>

#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

// Starts SketchCCL's side of the real communicator `real` (made from the 128-byte id `id`):
// nothing when SketchCCL is disabled, the id has no record, or the configuration is bad. Never
// waits: the join runs on the communicator's proxy.
void attach(ncclComm_t real, const uint8_t* id, int rank, int nranks, bool nonblocking);

// Whether a communicator made with `config` is nonblocking, as NCCL decides: NCCL_COMM_BLOCKING
// when 0 or 1 (it overrides the config), else the config's blocking field when set (else
// blocking), else `inherited` (a split with a NULL config inherits its parent's).
bool config_nonblocking(const ncclConfig_t* config, bool inherited);
// NCCL_COMM_BLOCKING=0: every communicator is nonblocking.
bool nonblocking_by_default();
// NCCL_COMM_BLOCKING: 0, 1, or -1 when unset or another value.
int blocking_env();

// A nonblocking split's newcomm, which NCCL writes from its own thread once the child is ready:
// NCCL is handed SketchCCL's heap slot (returned), so that SketchCCL never keeps the caller's
// slot (often a stack variable) past the split. The caller's slot is written once, as soon as
// NCCL has written the heap slot, by a watcher thread or by the parent's ncclCommGetAsyncError
// (publish_split_slots), whichever comes first, and never touched after.
std::shared_ptr<ncclComm_t> relay_split_slot(ncclComm_t parent, ncclComm_t* caller_slot);
// A split that failed in the call: its relay stops (NCCL writes nothing later).
void drop_split_slot(const std::shared_ptr<ncclComm_t>& slot);
// From ncclCommGetAsyncError(parent): the children NCCL has written reach their callers' slots
// before the caller can see the split done.
void publish_split_slots(ncclComm_t parent);

}  // namespace sketchccl::interpose
