// The NCCL functions SketchCCL never takes over: in front of a real NCCL they go to its twin
// with the caller's arguments, bit for bit, and return its result; standalone they are
// ncclInvalidUsage with a message in ncclGetLastError.
#include <nccl.h>

#include "interpose/exports.h"
#include "interpose/forward.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

// Counts a forwarded collective in the communicator's statistics.
void note(ncclComm_t comm) {
  if (auto c = Runtime::get().find(comm)) c->count_forwarded();
}

}  // namespace
}  // namespace sketchccl::interpose

using namespace sketchccl::interpose;  // NOLINT: the exported C functions below

SCCL_NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  SCCL_FORWARD(ncclMemAlloc, (ptr, size));
  return not_in_standalone("ncclMemAlloc");
}

SCCL_NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  SCCL_FORWARD(ncclMemFree, (ptr));
  return not_in_standalone("ncclMemFree");
}

SCCL_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  SCCL_FORWARD(ncclCommRevoke, (comm, revokeFlags));
  return not_in_standalone("ncclCommRevoke");
}

SCCL_NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
              void** handle) {
  SCCL_FORWARD(ncclCommRegister, (comm, buff, size, handle));
  return not_in_standalone("ncclCommRegister");
}

SCCL_NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  SCCL_FORWARD(ncclCommDeregister, (comm, handle));
  return not_in_standalone("ncclCommDeregister");
}

SCCL_NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
              ncclWindow_t* win, int winFlags) {
  SCCL_FORWARD(ncclCommWindowRegister, (comm, buff, size, win, winFlags));
  return not_in_standalone("ncclCommWindowRegister");
}

SCCL_NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  SCCL_FORWARD(ncclCommWindowDeregister, (comm, win));
  return not_in_standalone("ncclCommWindowDeregister");
}

SCCL_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
              ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  SCCL_FORWARD(ncclRedOpCreatePreMulSum, (op, scalar, datatype, residence, comm));
  return not_in_standalone("ncclRedOpCreatePreMulSum");
}

SCCL_NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  SCCL_FORWARD(ncclRedOpDestroy, (op, comm));
  return not_in_standalone("ncclRedOpDestroy");
}

SCCL_NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
              cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclReduce, (sendbuff, recvbuff, count, datatype, op, root, comm, stream));
  return not_in_standalone("ncclReduce");
}

SCCL_NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclBcast, (buff, count, datatype, root, comm, stream));
  return not_in_standalone("ncclBcast");
}

SCCL_NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclBroadcast, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  return not_in_standalone("ncclBroadcast");
}

SCCL_NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff,
              size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclReduceScatter, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream));
  return not_in_standalone("ncclReduceScatter");
}

SCCL_NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclAllGather, (sendbuff, recvbuff, sendcount, datatype, comm, stream));
  return not_in_standalone("ncclAllGather");
}

SCCL_NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclAlltoAll, (sendbuff, recvbuff, count, datatype, comm, stream));
  return not_in_standalone("ncclAlltoAll");
}

SCCL_NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclGather, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  return not_in_standalone("ncclGather");
}

SCCL_NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclScatter, (sendbuff, recvbuff, count, datatype, root, comm, stream));
  return not_in_standalone("ncclScatter");
}

SCCL_NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclSend, (sendbuff, count, datatype, peer, comm, stream));
  return not_in_standalone("ncclSend");
}

SCCL_NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  note(comm);
  SCCL_FORWARD(ncclRecv, (recvbuff, count, datatype, peer, comm, stream));
  return not_in_standalone("ncclRecv");
}

SCCL_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  SCCL_FORWARD(ncclGroupSimulateEnd, (simInfo));
  return not_in_standalone("ncclGroupSimulateEnd");
}

// Deprecated and without a twin in the real library: call its plain name there, if present.
namespace {
void reset_debug_init() {
  if (Runtime::get().standalone()) return;
  if (auto real = real_fn<void (*)()>("ncclResetDebugInit")) real();
}
}  // namespace

extern "C" __attribute__((visibility("default"))) void ncclResetDebugInit() {
  reset_debug_init();
}
extern "C" __attribute__((visibility("default"))) void pncclResetDebugInit() {
  reset_debug_init();
}
