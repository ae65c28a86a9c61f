// The NCCL functions SketchCCL never takes over, in front of a real NCCL: the real twin with the
// caller's arguments, bit for bit, and its result. Collectives count in the statistics.
#include "src/interpose/call_log.h"
#include "src/interpose/forward.h"
#include "src/interpose/interposed_front.h"
#include "src/interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

// Counts a forwarded collective in the communicator's statistics and logs it (COLL).
void count_forwarded(const RealApi& real, const char* name, const void* send, const void* recv,
                     size_t count, ncclDataType_t type, int op, int root, ncclComm_t comm,
                     cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  if (c != nullptr) c->count_forwarded();
  if (!call_log_enabled()) return;
  CallRecord rec;
  rec.name = name;
  rec.send = send;
  rec.recv = recv;
  rec.count = count;
  rec.type = type;
  rec.op = op;
  rec.root = root;
  rec.comm = comm;
  rec.nranks = c != nullptr ? c->nranks() : 0;
  rec.stream = stream;
  log_call(rec, "forwarded: SketchCCL takes over AllReduce and ReduceScatter only",
           real.ncclCommCount);
}

}  // namespace

ncclResult_t InterposedFront::mem_alloc(void** ptr, size_t size) {
  return forward(real_.ncclMemAlloc, "ncclMemAlloc", ptr, size);
}

ncclResult_t InterposedFront::mem_free(void* ptr) {
  return forward(real_.ncclMemFree, "ncclMemFree", ptr);
}

ncclResult_t InterposedFront::comm_register(const ncclComm_t comm, void* buff, size_t size,
                                            void** handle) {
  return forward(real_.ncclCommRegister, "ncclCommRegister", comm, buff, size, handle);
}

ncclResult_t InterposedFront::comm_deregister(const ncclComm_t comm, void* handle) {
  return forward(real_.ncclCommDeregister, "ncclCommDeregister", comm, handle);
}

ncclResult_t InterposedFront::comm_window_register(ncclComm_t comm, void* buff, size_t size,
                                                   ncclWindow_t* win, int winFlags) {
  return forward(real_.ncclCommWindowRegister, "ncclCommWindowRegister", comm, buff, size, win,
                 winFlags);
}

ncclResult_t InterposedFront::comm_window_deregister(ncclComm_t comm, ncclWindow_t win) {
  return forward(real_.ncclCommWindowDeregister, "ncclCommWindowDeregister", comm, win);
}

ncclResult_t InterposedFront::red_op_create_pre_mul_sum(ncclRedOp_t* op, void* scalar,
                                                        ncclDataType_t datatype,
                                                        ncclScalarResidence_t residence,
                                                        ncclComm_t comm) {
  return forward(real_.ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum", op, scalar, datatype,
                 residence, comm);
}

ncclResult_t InterposedFront::red_op_destroy(ncclRedOp_t op, ncclComm_t comm) {
  return forward(real_.ncclRedOpDestroy, "ncclRedOpDestroy", op, comm);
}

ncclResult_t InterposedFront::reduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  count_forwarded(real_, "Reduce", sendbuff, recvbuff, count, datatype, static_cast<int>(op), root,
                  comm, stream);
  return forward(real_.ncclReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root,
                 comm, stream);
}

ncclResult_t InterposedFront::bcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  count_forwarded(real_, "Bcast", buff, buff, count, datatype, -1, root, comm, stream);
  return forward(real_.ncclBcast, "ncclBcast", buff, count, datatype, root, comm, stream);
}

ncclResult_t InterposedFront::broadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  count_forwarded(real_, "Broadcast", sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
  return forward(real_.ncclBroadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, root,
                 comm, stream);
}

ncclResult_t InterposedFront::all_gather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  count_forwarded(real_, "AllGather", sendbuff, recvbuff, sendcount, datatype, -1, -1, comm,
                  stream);
  return forward(real_.ncclAllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype,
                 comm, stream);
}

ncclResult_t InterposedFront::all_to_all(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream) {
  count_forwarded(real_, "AlltoAll", sendbuff, recvbuff, count, datatype, -1, -1, comm, stream);
  return forward(real_.ncclAlltoAll, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm,
                 stream);
}

ncclResult_t InterposedFront::gather(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  count_forwarded(real_, "Gather", sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
  return forward(real_.ncclGather, "ncclGather", sendbuff, recvbuff, count, datatype, root, comm,
                 stream);
}

ncclResult_t InterposedFront::scatter(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  count_forwarded(real_, "Scatter", sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
  return forward(real_.ncclScatter, "ncclScatter", sendbuff, recvbuff, count, datatype, root, comm,
                 stream);
}

ncclResult_t InterposedFront::send(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                   int peer, ncclComm_t comm, cudaStream_t stream) {
  count_forwarded(real_, "Send", sendbuff, nullptr, count, datatype, -1, peer, comm, stream);
  return forward(real_.ncclSend, "ncclSend", sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t InterposedFront::recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  count_forwarded(real_, "Recv", nullptr, recvbuff, count, datatype, -1, peer, comm, stream);
  return forward(real_.ncclRecv, "ncclRecv", recvbuff, count, datatype, peer, comm, stream);
}

// Deprecated and without a twin in the real library: its plain name there, if present.
void InterposedFront::reset_debug_init() {
  if (real_.ncclResetDebugInit != nullptr) real_.ncclResetDebugInit();
}

}  // namespace sketchccl::interpose
