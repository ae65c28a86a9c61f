// The NCCL functions standalone mode does not implement: ncclInvalidUsage with a message in
// ncclGetLastError.
#include "src/interpose/last_error.h"
#include "src/interpose/standalone_front.h"

namespace sketchccl::interpose {

ncclResult_t StandaloneFront::comm_revoke(ncclComm_t /*comm*/, int /*revokeFlags*/) {
  return not_in_standalone("ncclCommRevoke");
}

ncclResult_t StandaloneFront::group_simulate_end(ncclSimInfo_t* /*simInfo*/) {
  return not_in_standalone("ncclGroupSimulateEnd");
}

void StandaloneFront::reset_debug_init() {}

}  // namespace sketchccl::interpose
