// The NCCL API behind the exports: one virtual per entry point, two engines. The interposed front
// stands before a real NCCL (forwards, or takes over per the policy); the standalone front runs
// the calls itself. The mode is chosen once, at load; no export asks it again.
#pragma once

#include <nccl.h>

namespace sketchccl::interpose {

class Front {
 public:
  virtual ~Front() = default;

  // Versions and communicator lifecycle.
  virtual ncclResult_t get_version(int* version) = 0;
  virtual ncclResult_t get_unique_id(ncclUniqueId* uniqueId) = 0;
  virtual ncclResult_t comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                      int rank) = 0;
  virtual ncclResult_t comm_init_rank_config(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                             int rank, ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_init_rank_scalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId* commIds, ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_init_all(ncclComm_t* comm, int ndev, const int* devlist) = 0;
  virtual ncclResult_t comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                  ncclConfig_t* config) = 0;
  virtual ncclResult_t comm_shrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                   ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) = 0;
  virtual ncclResult_t comm_finalize(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_destroy(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_abort(ncclComm_t comm) = 0;
  virtual ncclResult_t comm_revoke(ncclComm_t comm, int revokeFlags) = 0;

  // Communicator queries and errors.
  virtual ncclResult_t comm_count(const ncclComm_t comm, int* count) = 0;
  virtual ncclResult_t comm_user_rank(const ncclComm_t comm, int* rank) = 0;
  virtual ncclResult_t comm_cu_device(const ncclComm_t comm, int* device) = 0;
  virtual ncclResult_t comm_get_async_error(ncclComm_t comm, ncclResult_t* asyncError) = 0;
  virtual const char* get_error_string(ncclResult_t result) = 0;
  virtual const char* get_last_error(ncclComm_t comm) = 0;

  // Memory, buffer registration, reduction ops.
  virtual ncclResult_t mem_alloc(void** ptr, size_t size) = 0;
  virtual ncclResult_t mem_free(void* ptr) = 0;
  virtual ncclResult_t comm_register(const ncclComm_t comm, void* buff, size_t size,
                                     void** handle) = 0;
  virtual ncclResult_t comm_deregister(const ncclComm_t comm, void* handle) = 0;
  virtual ncclResult_t comm_window_register(ncclComm_t comm, void* buff, size_t size,
                                            ncclWindow_t* win, int winFlags) = 0;
  virtual ncclResult_t comm_window_deregister(ncclComm_t comm, ncclWindow_t win) = 0;
  virtual ncclResult_t red_op_create_pre_mul_sum(ncclRedOp_t* op, void* scalar,
                                                 ncclDataType_t datatype,
                                                 ncclScalarResidence_t residence,
                                                 ncclComm_t comm) = 0;
  virtual ncclResult_t red_op_destroy(ncclRedOp_t op, ncclComm_t comm) = 0;

  // Collectives and point-to-point; only AllReduce is ever taken over.
  virtual ncclResult_t all_reduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) = 0;
  virtual ncclResult_t reduce(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                              cudaStream_t stream) = 0;
  virtual ncclResult_t bcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                             ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t broadcast(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream) = 0;
  virtual ncclResult_t reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) = 0;
  virtual ncclResult_t all_gather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm,
                                  cudaStream_t stream) = 0;
  virtual ncclResult_t all_to_all(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclComm_t comm,
                                  cudaStream_t stream) = 0;
  virtual ncclResult_t gather(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream) = 0;
  virtual ncclResult_t scatter(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) = 0;
  virtual ncclResult_t send(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclComm_t comm, cudaStream_t stream) = 0;

  // Groups.
  virtual ncclResult_t group_start() = 0;
  virtual ncclResult_t group_end() = 0;
  virtual ncclResult_t group_simulate_end(ncclSimInfo_t* simInfo) = 0;

  // Deprecated, absent from nccl.h.
  virtual void reset_debug_init() = 0;
};

// The engine of this process: interposed when a real NCCL was loaded, else standalone.
Front& front();

// The two engines, each created on first use and never destroyed (exit handlers may call in).
Front& interposed_front();
Front& standalone_front();

}  // namespace sketchccl::interpose
