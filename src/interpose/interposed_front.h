// The engine in front of a real NCCL: each call goes to the real twin with the caller's
// arguments, bit for bit, and its result comes back unchanged; SketchCCL's side (communicators
// beside the real ones, taken-over AllReduces) is added around it. No lock is held while the real
// NCCL runs: it calls some of its own exports through the PLT.
#pragma once

#include "src/interpose/front.h"
#include "src/interpose/policy.h"
#include "src/interpose/real_api.h"

namespace sketchccl::coll {
class Communicator;
}

namespace sketchccl::interpose {

// The communicator's agreed state; waits (bounded) for a join still running, so that the first
// call after init sees the same state on every rank (AllReduce and ReduceScatter take-overs).
CommState comm_state(coll::Communicator* c, double timeout_s);

class InterposedFront final : public Front {
 public:
  explicit InterposedFront(const RealApi& real) : real_(real) {}

  ncclResult_t get_version(int* version) override;
  ncclResult_t get_unique_id(ncclUniqueId* uniqueId) override;
  ncclResult_t comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) override;
  ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) override;
  ncclResult_t comm_init_rank_scalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config) override;
  ncclResult_t comm_init_all(ncclComm_t* comm, int ndev, const int* devlist) override;
  ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                          ncclConfig_t* config) override;
  ncclResult_t comm_shrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                           ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) override;
  ncclResult_t comm_finalize(ncclComm_t comm) override;
  ncclResult_t comm_destroy(ncclComm_t comm) override;
  ncclResult_t comm_abort(ncclComm_t comm) override;
  ncclResult_t comm_revoke(ncclComm_t comm, int revokeFlags) override;
  ncclResult_t comm_count(const ncclComm_t comm, int* count) override;
  ncclResult_t comm_user_rank(const ncclComm_t comm, int* rank) override;
  ncclResult_t comm_cu_device(const ncclComm_t comm, int* device) override;
  ncclResult_t comm_get_async_error(ncclComm_t comm, ncclResult_t* asyncError) override;
  const char* get_error_string(ncclResult_t result) override;
  const char* get_last_error(ncclComm_t comm) override;
  ncclResult_t mem_alloc(void** ptr, size_t size) override;
  ncclResult_t mem_free(void* ptr) override;
  ncclResult_t comm_register(const ncclComm_t comm, void* buff, size_t size,
                             void** handle) override;
  ncclResult_t comm_deregister(const ncclComm_t comm, void* handle) override;
  ncclResult_t comm_window_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) override;
  ncclResult_t comm_window_deregister(ncclComm_t comm, ncclWindow_t win) override;
  ncclResult_t red_op_create_pre_mul_sum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                         ncclScalarResidence_t residence, ncclComm_t comm) override;
  ncclResult_t red_op_destroy(ncclRedOp_t op, ncclComm_t comm) override;
  ncclResult_t all_reduce(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                          cudaStream_t stream) override;
  ncclResult_t reduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t bcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                     cudaStream_t stream) override;
  ncclResult_t broadcast(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream) override;
  ncclResult_t reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                              cudaStream_t stream) override;
  ncclResult_t all_gather(const void* sendbuff, void* recvbuff, size_t sendcount,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t all_to_all(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t gather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                      int root, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t scatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t send(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                    ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                    ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t group_start() override;
  ncclResult_t group_end() override;
  ncclResult_t group_simulate_end(ncclSimInfo_t* simInfo) override;
  void reset_debug_init() override;

 private:
  const RealApi& real_;  // resolved once at load
};

}  // namespace sketchccl::interpose
