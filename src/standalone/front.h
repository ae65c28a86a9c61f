// The front without a real NCCL: SketchCCL's own ids, handles and communicators; AllReduce and
// ReduceScatter of float types with sum or avg on its compressed ring, every other collective and
// send/recv on its exact engine (exact_collectives.h). What it does not implement is refused
// (RefusingFront).
#pragma once

#include "src/standalone/refusing_front.h"

namespace sketchccl::standalone {

class StandaloneFront final : public RefusingFront {
 public:
  // Versions, ids and the communicator lifecycle (lifecycle.cc).
  ncclResult_t ncclGetVersion(int* version) override;
  ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) override;
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                int rank) override;
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                      ncclConfig_t* config) override;
  ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                        ncclUniqueId* commIds, ncclConfig_t* config) override;
  ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) override;
  ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                             ncclConfig_t* config) override;
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override;
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override;
  ncclResult_t ncclCommAbort(ncclComm_t comm) override;
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) override;
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) override;
  ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) override;

  // Errors and groups (front.cc).
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) override;
  const char* ncclGetErrorString(ncclResult_t result) override;
  const char* ncclGetLastError(ncclComm_t comm) override;
  ncclResult_t ncclGroupStart() override;
  ncclResult_t ncclGroupEnd() override;

  // Memory and registration (memory.cc), created reduction ops (created_ops.cc).
  ncclResult_t ncclMemAlloc(void** ptr, size_t size) override;
  ncclResult_t ncclMemFree(void* ptr) override;
  ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                void** handle) override;
  ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) override;
  ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                      int winFlags) override;
  ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) override;
  ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                        ncclScalarResidence_t residence, ncclComm_t comm) override;
  ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) override;

  // Every collective and send/recv (collective.cc).
  ncclResult_t collective(const api::CollCall& call) override;
};

// This process's StandaloneFront; created on first use and never destroyed (exit handlers may
// call in).
api::Front& standalone_front();

}  // namespace sketchccl::standalone
