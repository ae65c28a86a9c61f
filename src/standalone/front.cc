// The standalone front's creation, its error queries and its groups: work issued inside a group
// is waited for at the outermost ncclGroupEnd (src/api/group.h).
#include "src/standalone/front.h"

#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/result.h"
#include "src/api/runtime.h"

namespace sketchccl::standalone {

api::Front& standalone_front() {
  static auto* front = new StandaloneFront();  // leaked: exit handlers may still call in
  return *front;
}

ncclResult_t StandaloneFront::ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  auto c = api::Runtime::get().find(comm);
  if (c == nullptr || asyncError == nullptr) {
    return api::report(Status(Code::kInvalidArgument, "comm is not live or asyncError is NULL"),
                       "ncclCommGetAsyncError");
  }
  Status st = c->async_error();
  if (!st.ok() && st.code() != Code::kInProgress) api::set_last_error(st.message());
  *asyncError = api::to_nccl(st.code());
  return ncclSuccess;
}

const char* StandaloneFront::ncclGetErrorString(ncclResult_t result) {
  return api::error_string(result);
}

const char* StandaloneFront::ncclGetLastError(ncclComm_t /*comm*/) {
  return api::last_error_text();
}

ncclResult_t StandaloneFront::ncclGroupStart() {
  api::group::start();
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclGroupEnd() {
  Status st = api::group::end();
  if (!st.ok() && st.code() != Code::kInProgress) return api::report(st, "ncclGroupEnd");
  if (st.code() == Code::kInProgress) return ncclInProgress;
  return ncclSuccess;
}

}  // namespace sketchccl::standalone
