// The interposed front's creation and its groups: ncclGroupStart/End go to the real NCCL, and the
// calls SketchCCL took over inside a group launch at its outermost end (src/api/group.h).
#include "src/interpose/front.h"

#include "src/api/group.h"
#include "src/interpose/forward.h"
#include "src/interpose/hierarchy_run.h"
#include "src/interpose/real_nccl.h"

namespace sketchccl::interpose {

api::Front& interposed_front() {
  static auto* front = new InterposedFront(loaded_nccl().api);  // leaked: exit handlers call in
  return *front;
}

ncclResult_t InterposedFront::ncclGroupStart() {
  api::group::start();
  return forward(real_.ncclGroupStart, "ncclGroupStart");
}

ncclResult_t InterposedFront::ncclGroupEnd() {
  // The real group first: it launches the forwarded calls and completes real inits and splits
  // (whose handles SketchCCL's deferred work then uses).
  if (real_.ncclGroupEnd == nullptr) return missing_real("ncclGroupEnd");
  ncclResult_t real_result = forward(real_.ncclGroupEnd, "ncclGroupEnd");
  Status st = api::group::end();
  // The group's blocking inits have run: their node communicators are split now.
  if (real_result == ncclSuccess) {
    node_comms_at_group_end(real_);
  } else {
    forget_grouped_inits();
  }
  if (real_result != ncclSuccess && real_result != ncclInProgress) return real_result;
  if (!st.ok() && st.code() != Code::kInProgress) return api::report(st, "ncclGroupEnd");
  if (real_result == ncclInProgress || st.code() == Code::kInProgress) return ncclInProgress;
  return ncclSuccess;
}

ncclResult_t InterposedFront::ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  // Ends SketchCCL's group too (its depth must not leak). The calls it deferred go to the real
  // NCCL before its simulation ends the real group, so NCCL simulates them and nothing runs.
  if (real_.ncclGroupSimulateEnd == nullptr) return missing_real("ncclGroupSimulateEnd");
  Status waited = Status::Ok();
  const ncclResult_t handed = api::group::simulate_end(&waited);
  ncclResult_t real_result = forward(real_.ncclGroupSimulateEnd, "ncclGroupSimulateEnd", simInfo);
  if (real_result != ncclSuccess && real_result != ncclInProgress) return real_result;
  if (handed != ncclSuccess) return handed;
  if (!waited.ok() && waited.code() != Code::kInProgress) {
    return api::report(waited, "ncclGroupEnd");
  }
  return real_result;
}

}  // namespace sketchccl::interpose
