// Suspending a communicator in front of a real NCCL (2.29.7): ncclCommSuspend with
// NCCL_SUSPEND_MEM gives back SketchCCL's device and pinned memory of that communicator too,
// ncclCommResume lets the next call make it again (lazily), and ncclCommMemStats adds what
// SketchCCL holds of the GPU to NCCL's figures (docs/interposition.md).
#include "src/api/runtime.h"
#include "src/core/log.h"
#include "src/interpose/forward.h"
#include "src/interpose/front.h"

namespace sketchccl::interpose {

ncclResult_t InterposedFront::ncclCommSuspend(ncclComm_t comm, int flags) {
  if (real_.ncclCommSuspend == nullptr) return ForwardingFront::ncclCommSuspend(comm, flags);
  auto c = api::Runtime::get().find(comm);
  if (c != nullptr) {
    // From now until the resume its calls go to NCCL, which refuses or runs them as it does.
    c->set_suspended(true);
    if ((flags & NCCL_SUSPEND_MEM) != 0) {
      Status st = c->release_device_memory();
      if (!st.ok()) {
        SCCL_WARN(kLogInit, "ncclCommSuspend: SketchCCL's memory of %p: %s",
                  static_cast<void*>(comm), st.to_string().c_str());
      }
    }
  }
  return ForwardingFront::ncclCommSuspend(comm, flags);
}

ncclResult_t InterposedFront::ncclCommResume(ncclComm_t comm) {
  const ncclResult_t r = ForwardingFront::ncclCommResume(comm);
  // Still suspended when NCCL's resume failed; the memory comes back at the next device call.
  if (r == ncclSuccess || r == ncclInProgress) {
    if (auto c = api::Runtime::get().find(comm)) c->set_suspended(false);
  }
  return r;
}

ncclResult_t InterposedFront::ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat,
                                               uint64_t* value) {
  const ncclResult_t r = ForwardingFront::ncclCommMemStats(comm, stat, value);
  if (r != ncclSuccess || value == nullptr) return r;
  auto c = api::Runtime::get().find(comm);
  if (c == nullptr) return r;
  // SketchCCL's device memory (scratch, residuals) is all of the kind a suspend releases; pinned
  // and pooled host memory is no GPU memory and has no category here (sketchcclCommGetStats and
  // the statistics file report it, docs/memory.md).
  const coll::CommStats s = c->stats();
  if (stat == ncclStatGpuMemSuspend || stat == ncclStatGpuMemTotal) *value += s.device_bytes;
  return r;
}

}  // namespace sketchccl::interpose
