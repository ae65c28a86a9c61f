// SketchCCL's side of a communicator's lifecycle, the same for both engines: the split over the
// parent's ring, and taking a communicator out of the side table at destroy or abort.
#pragma once

#include <nccl.h>

#include <functional>
#include <memory>

#include "coll/comm.h"
#include "core/status.h"

namespace sketchccl::interpose {

// ncclCommSplit's membership exchange: an all-gather of (color, key) over the parent's ring.
// `adopt` registers the child once it exists (none for NCCL_SPLIT_NOCOLOR or on failure).
// Inside a group it is deferred to ncclGroupEnd (deferred = true); else waited for.
struct SplitOutcome {
  bool deferred = false;
  Status status;                              // of the exchange, when not deferred
  std::shared_ptr<coll::Communicator> child;  // when not deferred
};
SplitOutcome split_side(coll::Communicator& parent, int color, int key,
                        std::function<void(const std::shared_ptr<coll::Communicator>&)> adopt);

// ncclCommDestroy: removes `comm` from the side table, finishes its queued work and writes its
// statistics. found: it was there; status: its finalize.
struct Detached {
  bool found = false;
  Status status;
};
Detached destroy_side(ncclComm_t comm);

// ncclCommAbort: removes `comm`, stops it promptly and writes its statistics. False: not there.
bool abort_side(ncclComm_t comm);

}  // namespace sketchccl::interpose
