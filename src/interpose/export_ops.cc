// The exported memory, registration, reduction-op, collective and group functions: each hands
// the caller's arguments, untouched, to the engine of this process (front.h).
#include <nccl.h>

#include "src/interpose/exports.h"
#include "src/interpose/front.h"
#include "src/interpose/guard.h"

using sketchccl::interpose::front;    // NOLINT: the exported C functions below
using sketchccl::interpose::guarded;  // NOLINT

SCCL_NCCL_API(ncclMemAlloc);
ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return guarded("ncclMemAlloc", [&] { return front().mem_alloc(ptr, size); });
}

SCCL_NCCL_API(ncclMemFree);
ncclResult_t pncclMemFree(void* ptr) {
  return guarded("ncclMemFree", [&] { return front().mem_free(ptr); });
}

SCCL_NCCL_API(ncclCommRegister);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guarded("ncclCommRegister",
                 [&] { return front().comm_register(comm, buff, size, handle); });
}

SCCL_NCCL_API(ncclCommDeregister);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded("ncclCommDeregister", [&] { return front().comm_deregister(comm, handle); });
}

SCCL_NCCL_API(ncclCommWindowRegister);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags) {
  return guarded("ncclCommWindowRegister",
                 [&] { return front().comm_window_register(comm, buff, size, win, winFlags); });
}

SCCL_NCCL_API(ncclCommWindowDeregister);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded("ncclCommWindowDeregister",
                 [&] { return front().comm_window_deregister(comm, win); });
}

SCCL_NCCL_API(ncclRedOpCreatePreMulSum);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  return guarded("ncclRedOpCreatePreMulSum", [&] {
    return front().red_op_create_pre_mul_sum(op, scalar, datatype, residence, comm);
  });
}

SCCL_NCCL_API(ncclRedOpDestroy);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded("ncclRedOpDestroy", [&] { return front().red_op_destroy(op, comm); });
}

SCCL_NCCL_API(ncclAllReduce);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream) {
  return guarded("ncclAllReduce", [&] {
    return front().all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  });
}

SCCL_NCCL_API(ncclReduce);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  return guarded("ncclReduce", [&] {
    return front().reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

SCCL_NCCL_API(ncclBcast);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclBcast",
                 [&] { return front().bcast(buff, count, datatype, root, comm, stream); });
}

SCCL_NCCL_API(ncclBroadcast);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream) {
  return guarded("ncclBroadcast", [&] {
    return front().broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

SCCL_NCCL_API(ncclReduceScatter);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream) {
  return guarded("ncclReduceScatter", [&] {
    return front().reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  });
}

SCCL_NCCL_API(ncclAllGather);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAllGather", [&] {
    return front().all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  });
}

SCCL_NCCL_API(ncclAlltoAll);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclAlltoAll", [&] {
    return front().all_to_all(sendbuff, recvbuff, count, datatype, comm, stream);
  });
}

SCCL_NCCL_API(ncclGather);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclGather", [&] {
    return front().gather(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

SCCL_NCCL_API(ncclScatter);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclScatter", [&] {
    return front().scatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

SCCL_NCCL_API(ncclSend);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclSend",
                 [&] { return front().send(sendbuff, count, datatype, peer, comm, stream); });
}

SCCL_NCCL_API(ncclRecv);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream) {
  return guarded("ncclRecv",
                 [&] { return front().recv(recvbuff, count, datatype, peer, comm, stream); });
}

SCCL_NCCL_API(ncclGroupStart);
ncclResult_t pncclGroupStart() {
  return guarded("ncclGroupStart", [&] { return front().group_start(); });
}

SCCL_NCCL_API(ncclGroupEnd);
ncclResult_t pncclGroupEnd() {
  return guarded("ncclGroupEnd", [&] { return front().group_end(); });
}

SCCL_NCCL_API(ncclGroupSimulateEnd);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded("ncclGroupSimulateEnd", [&] { return front().group_simulate_end(simInfo); });
}

// Deprecated and absent from nccl.h (no twin in the real library): exported under both names.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInit() {
  front().reset_debug_init();
}
extern "C" __attribute__((visibility("default"))) void pncclResetDebugInit() {
  front().reset_debug_init();
}
