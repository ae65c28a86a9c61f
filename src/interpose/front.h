// The front in front of a real NCCL: every call goes to the real twin (ForwardingFront), and
// SketchCCL's side is added around the lifecycle calls (communicators beside the real ones) and
// the groups; an AllReduce or ReduceScatter the policy allows is taken over. No lock is held while
// the real NCCL runs: it calls some of its own exports through the PLT.
#pragma once

#include "src/interpose/forwarding_front.h"

namespace sketchccl::interpose {

class InterposedFront final : public ForwardingFront {
 public:
  using ForwardingFront::ForwardingFront;

  // Ids and the communicator lifecycle (lifecycle.cc).
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
  ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                              ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) override;
  ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) override;
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override;
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override;
  ncclResult_t ncclCommAbort(ncclComm_t comm) override;

  // Suspension (suspend.cc): SketchCCL's memory of the communicator released and counted too.
  ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) override;
  ncclResult_t ncclCommResume(ncclComm_t comm) override;
  ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) override;

  // Errors: SketchCCL's when the failure was its own (errors.cc).
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) override;
  const char* ncclGetErrorString(ncclResult_t result) override;
  const char* ncclGetLastError(ncclComm_t comm) override;

  // Groups: the calls taken over inside one launch at its end (front.cc).
  ncclResult_t ncclGroupStart() override;
  ncclResult_t ncclGroupEnd() override;
  ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) override;

  // AllReduce and ReduceScatter: taken over or forwarded, per the policy (take_over.cc); the
  // other calls as ForwardingFront.
  ncclResult_t collective(const api::CollCall& call) override;

 private:
  ncclResult_t take_over(api::CollCall call);
  // An nccl*Config call: its config read (src/api/coll_config.h), then as the plain call, or
  // forwarded unchanged where the config pins NCCL's algorithms or asks for exact.
  ncclResult_t config_collective(api::CollCall call);
};

// A communicator whose device path failed to set up (a synchronous failure of a device-buffer
// submission, nothing enqueued): its later device calls are forwarded (WARNed once). Forgotten
// at destroy and abort (NCCL may reuse the handle).
bool device_path_failed(ncclComm_t comm);
void mark_device_path_failed(ncclComm_t comm, const Status& why);
void forget_device_path(ncclComm_t comm);

// This process's InterposedFront, in front of loaded_nccl(); created on first use and never
// destroyed (exit handlers may call in).
api::Front& interposed_front();

}  // namespace sketchccl::interpose
