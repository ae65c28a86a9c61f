// The exported communicator functions and error queries: each hands the caller's arguments,
// untouched, to the engine of this process (front.h) behind a guard that stops exceptions.
#include <nccl.h>

#include "src/interpose/exports.h"
#include "src/interpose/front.h"
#include "src/interpose/guard.h"

using sketchccl::interpose::front;         // NOLINT: the exported C functions below
using sketchccl::interpose::guarded;       // NOLINT
using sketchccl::interpose::guarded_text;  // NOLINT

SCCL_NCCL_API(ncclGetVersion);
ncclResult_t pncclGetVersion(int* version) {
  return guarded("ncclGetVersion", [&] { return front().get_version(version); });
}

SCCL_NCCL_API(ncclGetUniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded("ncclGetUniqueId", [&] { return front().get_unique_id(uniqueId); });
}

SCCL_NCCL_API(ncclCommInitRank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guarded("ncclCommInitRank",
                 [&] { return front().comm_init_rank(comm, nranks, commId, rank); });
}

SCCL_NCCL_API(ncclCommInitRankConfig);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  return guarded("ncclCommInitRankConfig",
                 [&] { return front().comm_init_rank_config(comm, nranks, commId, rank, config); });
}

SCCL_NCCL_API(ncclCommInitRankScalable);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config) {
  return guarded("ncclCommInitRankScalable", [&] {
    return front().comm_init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config);
  });
}

SCCL_NCCL_API(ncclCommInitAll);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return guarded("ncclCommInitAll", [&] { return front().comm_init_all(comm, ndev, devlist); });
}

SCCL_NCCL_API(ncclCommSplit);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config) {
  return guarded("ncclCommSplit",
                 [&] { return front().comm_split(comm, color, key, newcomm, config); });
}

SCCL_NCCL_API(ncclCommShrink);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guarded("ncclCommShrink", [&] {
    return front().comm_shrink(comm, excludeRanksList, excludeRanksCount, newcomm, config,
                               shrinkFlags);
  });
}

SCCL_NCCL_API(ncclCommFinalize);
ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return guarded("ncclCommFinalize", [&] { return front().comm_finalize(comm); });
}

SCCL_NCCL_API(ncclCommDestroy);
ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return guarded("ncclCommDestroy", [&] { return front().comm_destroy(comm); });
}

SCCL_NCCL_API(ncclCommAbort);
ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return guarded("ncclCommAbort", [&] { return front().comm_abort(comm); });
}

SCCL_NCCL_API(ncclCommRevoke);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded("ncclCommRevoke", [&] { return front().comm_revoke(comm, revokeFlags); });
}

SCCL_NCCL_API(ncclCommCount);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return guarded("ncclCommCount", [&] { return front().comm_count(comm, count); });
}

SCCL_NCCL_API(ncclCommUserRank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded("ncclCommUserRank", [&] { return front().comm_user_rank(comm, rank); });
}

SCCL_NCCL_API(ncclCommCuDevice);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded("ncclCommCuDevice", [&] { return front().comm_cu_device(comm, device); });
}

SCCL_NCCL_API(ncclCommGetAsyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded("ncclCommGetAsyncError",
                 [&] { return front().comm_get_async_error(comm, asyncError); });
}

SCCL_NCCL_API(ncclGetErrorString);
const char* pncclGetErrorString(ncclResult_t result) {
  return guarded_text([&] { return front().get_error_string(result); });
}

SCCL_NCCL_API(ncclGetLastError);
const char* pncclGetLastError(ncclComm_t comm) {
  return guarded_text([&] { return front().get_last_error(comm); });
}
