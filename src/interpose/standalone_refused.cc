// The NCCL functions standalone mode does not implement: ncclInvalidUsage with a message in
// ncclGetLastError.
#include "interpose/last_error.h"
#include "interpose/runtime.h"
#include "interpose/standalone_front.h"

namespace sketchccl::interpose {
namespace {

// A collective of a live communicator is counted in its statistics as forwarded, as it was before
// the engines were split (its calls_forwarded figure stays the same).
ncclResult_t refuse_collective(ncclComm_t comm, const char* api) {
  if (auto c = Runtime::get().find(comm)) c->count_forwarded();
  return not_in_standalone(api);
}

}  // namespace

ncclResult_t StandaloneFront::comm_revoke(ncclComm_t /*comm*/, int /*revokeFlags*/) {
  return not_in_standalone("ncclCommRevoke");
}

ncclResult_t StandaloneFront::mem_alloc(void** /*ptr*/, size_t /*size*/) {
  return not_in_standalone("ncclMemAlloc");
}

ncclResult_t StandaloneFront::mem_free(void* /*ptr*/) {
  return not_in_standalone("ncclMemFree");
}

ncclResult_t StandaloneFront::comm_register(const ncclComm_t /*comm*/, void* /*buff*/,
                                            size_t /*size*/, void** /*handle*/) {
  return not_in_standalone("ncclCommRegister");
}

ncclResult_t StandaloneFront::comm_deregister(const ncclComm_t /*comm*/, void* /*handle*/) {
  return not_in_standalone("ncclCommDeregister");
}

ncclResult_t StandaloneFront::comm_window_register(ncclComm_t /*comm*/, void* /*buff*/,
                                                   size_t /*size*/, ncclWindow_t* /*win*/,
                                                   int /*winFlags*/) {
  return not_in_standalone("ncclCommWindowRegister");
}

ncclResult_t StandaloneFront::comm_window_deregister(ncclComm_t /*comm*/, ncclWindow_t /*win*/) {
  return not_in_standalone("ncclCommWindowDeregister");
}

ncclResult_t StandaloneFront::red_op_create_pre_mul_sum(ncclRedOp_t* /*op*/, void* /*scalar*/,
                                                        ncclDataType_t /*datatype*/,
                                                        ncclScalarResidence_t /*residence*/,
                                                        ncclComm_t /*comm*/) {
  return not_in_standalone("ncclRedOpCreatePreMulSum");
}

ncclResult_t StandaloneFront::red_op_destroy(ncclRedOp_t /*op*/, ncclComm_t /*comm*/) {
  return not_in_standalone("ncclRedOpDestroy");
}

ncclResult_t StandaloneFront::reduce(const void* /*sendbuff*/, void* /*recvbuff*/, size_t /*count*/,
                                     ncclDataType_t /*datatype*/, ncclRedOp_t /*op*/, int /*root*/,
                                     ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclReduce");
}

ncclResult_t StandaloneFront::bcast(void* /*buff*/, size_t /*count*/, ncclDataType_t /*datatype*/,
                                    int /*root*/, ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclBcast");
}

ncclResult_t StandaloneFront::broadcast(const void* /*sendbuff*/, void* /*recvbuff*/,
                                        size_t /*count*/, ncclDataType_t /*datatype*/, int /*root*/,
                                        ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclBroadcast");
}

ncclResult_t StandaloneFront::all_gather(const void* /*sendbuff*/, void* /*recvbuff*/,
                                         size_t /*sendcount*/, ncclDataType_t /*datatype*/,
                                         ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclAllGather");
}

ncclResult_t StandaloneFront::all_to_all(const void* /*sendbuff*/, void* /*recvbuff*/,
                                         size_t /*count*/, ncclDataType_t /*datatype*/,
                                         ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclAlltoAll");
}

ncclResult_t StandaloneFront::gather(const void* /*sendbuff*/, void* /*recvbuff*/, size_t /*count*/,
                                     ncclDataType_t /*datatype*/, int /*root*/, ncclComm_t comm,
                                     cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclGather");
}

ncclResult_t StandaloneFront::scatter(const void* /*sendbuff*/, void* /*recvbuff*/,
                                      size_t /*count*/, ncclDataType_t /*datatype*/, int /*root*/,
                                      ncclComm_t comm, cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclScatter");
}

ncclResult_t StandaloneFront::send(const void* /*sendbuff*/, size_t /*count*/,
                                   ncclDataType_t /*datatype*/, int /*peer*/, ncclComm_t comm,
                                   cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclSend");
}

ncclResult_t StandaloneFront::recv(void* /*recvbuff*/, size_t /*count*/,
                                   ncclDataType_t /*datatype*/, int /*peer*/, ncclComm_t comm,
                                   cudaStream_t /*stream*/) {
  return refuse_collective(comm, "ncclRecv");
}

ncclResult_t StandaloneFront::group_simulate_end(ncclSimInfo_t* /*simInfo*/) {
  return not_in_standalone("ncclGroupSimulateEnd");
}

void StandaloneFront::reset_debug_init() {}

}  // namespace sketchccl::interpose
