// SketchCCL's side of a communicator's lifecycle, the same for both fronts: the split over the
// parent's ring, and taking a communicator out of the side table at destroy or abort.
#pragma once

#include <nccl.h>

#include <functional>
#include <memory>

#include "src/coll/comm.h"
#include "src/core/status.h"

namespace sketchccl::api {

// ncclCommSplit's membership exchange: an all-gather of (color, key) over the parent's ring.
// `adopt` registers the child once it exists (none for NCCL_SPLIT_NOCOLOR or on failure).
// Inside a group it is deferred to ncclGroupEnd (deferred = true); else waited for.
struct SplitOutcome {
  bool deferred = false;
  Status status;                              // of the exchange, when not deferred
  std::shared_ptr<coll::Communicator> child;  // when not deferred
};
SplitOutcome split_side(coll::Communicator& parent, int color, int key, bool child_nonblocking,
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

// abort_side in two halves, for the real abort (or revoke, or shrink with NCCL_SHRINK_ABORT) to
// run between them: stop_side() removes `comm` and signals its proxy without blocking (null: not
// there); join_side() waits for the proxy at most kSideJoinSeconds (a proxy stuck in a device
// wait is left running, its communicator kept alive, with a warning) and writes the statistics.
constexpr double kSideJoinSeconds = 5.0;
std::shared_ptr<coll::Communicator> stop_side(ncclComm_t comm);
void join_side(std::shared_ptr<coll::Communicator> comm);

}  // namespace sketchccl::api
