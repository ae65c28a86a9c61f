// Error queries in front of a real NCCL: the real answer, unless the failure was SketchCCL's own
// (a taken-over call), which is then the communicator's and the process's last error too.
#include "src/api/last_error.h"
#include "src/api/result.h"
#include "src/api/runtime.h"
#include "src/interpose/comm_side.h"
#include "src/interpose/forward.h"
#include "src/interpose/front.h"

namespace sketchccl::interpose {

ncclResult_t InterposedFront::ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  // NCCL calls this through the PLT from its own enqueue and init paths: no lock is held here
  // while the real function runs.
  auto c = api::Runtime::get().find(comm);
  if (real_.ncclCommGetAsyncError == nullptr) return missing_real("ncclCommGetAsyncError");
  // The real result as is: a failure here does not make ncclGetLastError the real one's.
  ncclResult_t r = real_.ncclCommGetAsyncError(comm, asyncError);
  // A nonblocking split of `comm` that NCCL finished is in the caller's newcomm before the caller
  // can see it done.
  publish_split_slots(comm);
  // A failure of a taken-over call is this communicator's error too; a join in progress is not
  // (it is invisible to the caller until its first AllReduce).
  if (r == ncclSuccess && asyncError != nullptr && *asyncError == ncclSuccess && c != nullptr &&
      c->init_work()->done() && c->init_work()->wait().ok()) {
    Status st = c->async_error();
    if (!st.ok() && st.code() != Code::kInProgress && c->configs_agree()) {
      api::set_last_error(st.message());
      *asyncError = api::to_nccl(st.code());
    }
  }
  return r;
}

const char* InterposedFront::ncclGetErrorString(ncclResult_t result) {
  if (real_.ncclGetErrorString != nullptr) return real_.ncclGetErrorString(result);
  return api::error_string(result);
}

const char* InterposedFront::ncclGetLastError(ncclComm_t comm) {
  if (!api::last_error_is_ours() && real_.ncclGetLastError != nullptr) {
    return real_.ncclGetLastError(comm);
  }
  return api::last_error_text();
}

}  // namespace sketchccl::interpose
