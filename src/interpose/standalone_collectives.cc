// The collectives standalone mode runs exactly (coll/collectives.h), for every datatype and op:
// Reduce, Broadcast/Bcast, AllGather, AlltoAll, Gather, Scatter; AllReduce and ReduceScatter
// come here for what the compressed engine does not take (standalone_coll.cc).
#include "src/interpose/standalone_exact.h"
#include "src/interpose/standalone_front.h"

namespace sketchccl::interpose {

using coll::CollKind;

ncclResult_t StandaloneFront::reduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  return exact_call(CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream,
                    "ncclReduce");
}

ncclResult_t StandaloneFront::bcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return exact_call(CollKind::kBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream,
                    "ncclBcast");
}

ncclResult_t StandaloneFront::broadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return exact_call(CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream, "ncclBroadcast");
}

ncclResult_t StandaloneFront::all_gather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  return exact_call(CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
                    stream, "ncclAllGather");
}

ncclResult_t StandaloneFront::all_to_all(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  return exact_call(CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm,
                    stream, "ncclAlltoAll");
}

ncclResult_t StandaloneFront::gather(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return exact_call(CollKind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream, "ncclGather");
}

ncclResult_t StandaloneFront::scatter(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  return exact_call(CollKind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream, "ncclScatter");
}

}  // namespace sketchccl::interpose
