// ncclMemAlloc/ncclMemFree and buffer registration in standalone mode. With CUDA and a device
// ncclMemAlloc gives device memory of the current device (cudaMalloc), as NCCL does; without one,
// host memory aligned to 4 KiB (what the host-memory engine runs on). Registration is accepted
// and does nothing: the engine copies through its own packet memory and needs no registration.
#include <cstdint>
#include <cstdlib>

#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/backend/cuda_stage.h"
#include "src/standalone/front.h"

namespace sketchccl::standalone {
namespace {

constexpr size_t kMemAlign = 4096;

// The handles registration returns: not NULL, never dereferenced.
char g_registration_token;

Status live(ncclComm_t comm) {
  if (api::Runtime::get().find(comm) == nullptr) {
    return Status(Code::kInvalidArgument, "comm is not a live communicator");
  }
  return Status::Ok();
}

}  // namespace

ncclResult_t StandaloneFront::ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr || size == 0) {
    return api::report(Status(Code::kInvalidArgument, "ptr is NULL or size is 0"), "ncclMemAlloc");
  }
  if (backend::has_cuda_backend())
    return api::report(backend::device_alloc(ptr, size), "ncclMemAlloc");
  if (size > SIZE_MAX - kMemAlign) {
    return api::report(Status(Code::kInvalidArgument, "size overflows"), "ncclMemAlloc");
  }
  void* p = std::aligned_alloc(kMemAlign, (size + kMemAlign - 1) / kMemAlign * kMemAlign);
  if (p == nullptr) {
    return api::report(errorf(Code::kSystemError, "cannot allocate %zu bytes", size),
                       "ncclMemAlloc");
  }
  *ptr = p;
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclMemFree(void* ptr) {
  if (ptr != nullptr && backend::has_cuda_backend() && backend::is_device_pointer(ptr)) {
    return api::report(backend::device_free(ptr), "ncclMemFree");
  }
  std::free(ptr);  // NULL: nothing to do
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommRegister(const ncclComm_t comm, void* /*buff*/,
                                               size_t /*size*/, void** handle) {
  Status st = live(comm);
  if (st.ok() && handle == nullptr) st = Status(Code::kInvalidArgument, "handle is NULL");
  if (!st.ok()) return api::report(st, "ncclCommRegister");
  *handle = &g_registration_token;
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommDeregister(const ncclComm_t comm, void* /*handle*/) {
  Status st = live(comm);
  if (!st.ok()) return api::report(st, "ncclCommDeregister");
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommWindowRegister(ncclComm_t comm, void* /*buff*/,
                                                     size_t /*size*/, ncclWindow_t* win,
                                                     int /*winFlags*/) {
  Status st = live(comm);
  if (st.ok() && win == nullptr) st = Status(Code::kInvalidArgument, "win is NULL");
  if (!st.ok()) return api::report(st, "ncclCommWindowRegister");
  *win = reinterpret_cast<ncclWindow_t>(&g_registration_token);
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t /*win*/) {
  Status st = live(comm);
  if (!st.ok()) return api::report(st, "ncclCommWindowDeregister");
  return ncclSuccess;
}

}  // namespace sketchccl::standalone
