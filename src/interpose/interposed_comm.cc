// The communicator lifecycle in front of a real NCCL: the real call first, with the caller's
// arguments, and its result returned unchanged; SketchCCL state is added beside the real
// communicator (side table keyed by the real handle) when the id carries a SketchCCL record.
#include <cstring>

#include "src/backend/cuda_query.h"
#include "src/bootstrap/bootstrap.h"
#include "src/core/config.h"
#include "src/core/log.h"
#include "src/interpose/comm_side.h"
#include "src/interpose/forward.h"
#include "src/interpose/hierarchy_run.h"
#include "src/interpose/interposed_front.h"
#include "src/interpose/result.h"
#include "src/interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

using coll::Communicator;

// ncclCommInitAll calls ncclGetUniqueId through the PLT: that id must not get a record (its root
// listener would wait for ranks that never come). SketchCCL makes its own id for InitAll.
thread_local bool t_in_init_all = false;

bool enabled() {
  return Config::global().get_bool(Var::kEnable);
}

bool started(ncclResult_t r) {
  return r == ncclSuccess || r == ncclInProgress;
}

// Starts SketchCCL's side of a communicator whose real twin exists.
void attach(const RealApi& real_api, ncclComm_t real, const uint8_t* id, int rank, int nranks,
            bool nonblocking) {
  if (real == nullptr || !enabled() || !bootstrap::has_record(id)) return;
  Runtime& rt = Runtime::get();
  if (!rt.config_status().ok()) return;  // logged once at load: forwarded
  Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id, coll::kIdBytes);
  args.standalone = false;
  args.nonblocking = nonblocking;
  // The communicator's device: the real communicator's (ncclCommInitAll gives each its own),
  // else the caller's current one, as NCCL takes it at init.
  args.cuda_device = backend::current_cuda_device();
  if (backend::has_cuda_backend()) {
    int dev = -1;
    if (real_api.ncclCommCuDevice != nullptr &&
        real_api.ncclCommCuDevice(real, &dev) == ncclSuccess && dev >= 0) {
      args.cuda_device = dev;
    }
  }
  rt.add(real, Communicator::create(args, rt.settings(), rt.config_hash()));
}

const uint8_t* id_bytes(const ncclUniqueId& id) {
  return reinterpret_cast<const uint8_t*>(id.internal);
}

}  // namespace

ncclResult_t InterposedFront::get_version(int* version) {
  return forward(real_.ncclGetVersion, "ncclGetVersion", version);
}

ncclResult_t InterposedFront::get_unique_id(ncclUniqueId* uniqueId) {
  ncclResult_t r = forward(real_.ncclGetUniqueId, "ncclGetUniqueId", uniqueId);
  Runtime& rt = Runtime::get();
  if (r != ncclSuccess || t_in_init_all || !enabled() || !rt.config_status().ok()) return r;
  // NCCL wrote bytes 0-39 and zeroed the rest: the record goes into 40-127.
  Status st = bootstrap::create_root(reinterpret_cast<uint8_t*>(uniqueId->internal),
                                     bootstrap::Options::from_config());
  if (!st.ok()) {
    SCCL_WARN(kLogInit, "no SketchCCL record in this id (%s): its communicator is forwarded",
              st.message().c_str());
  }
  return r;
}

ncclResult_t InterposedFront::comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                             int rank) {
  ncclResult_t r = forward(real_.ncclCommInitRank, "ncclCommInitRank", comm, nranks, commId, rank);
  if (started(r)) attach(real_, *comm, id_bytes(commId), rank, nranks, nonblocking_by_default());
  return r;
}

ncclResult_t InterposedFront::comm_init_rank_config(ncclComm_t* comm, int nranks,
                                                    ncclUniqueId commId, int rank,
                                                    ncclConfig_t* config) {
  ncclResult_t r = forward(real_.ncclCommInitRankConfig, "ncclCommInitRankConfig", comm, nranks,
                           commId, rank, config);
  if (started(r)) {
    attach(real_, *comm, id_bytes(commId), rank, nranks, config_nonblocking(config, false));
  }
  return r;
}

ncclResult_t InterposedFront::comm_init_rank_scalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                      int nId, ncclUniqueId* commIds,
                                                      ncclConfig_t* config) {
  ncclResult_t r = forward(real_.ncclCommInitRankScalable, "ncclCommInitRankScalable", newcomm,
                           nranks, myrank, nId, commIds, config);
  // SketchCCL's rendezvous uses the first id only; the root listeners this process started
  // for the others stop now (no rank will ever come to them).
  if (started(r) && nId >= 1 && commIds != nullptr) {
    attach(real_, *newcomm, id_bytes(commIds[0]), myrank, nranks,
           config_nonblocking(config, false));
    for (int i = 1; i < nId; ++i)
      bootstrap::release_root(id_bytes(commIds[i]));
  }
  return r;
}

ncclResult_t InterposedFront::comm_init_all(ncclComm_t* comm, int ndev, const int* devlist) {
  if (real_.ncclCommInitAll == nullptr) return missing_real("ncclCommInitAll");
  // NCCL's own id for it gets no record (no root listener waiting for ranks that never come),
  // and its communicators no SketchCCL state: all its ranks are GPUs of this one process, linked
  // by NVLink or PCIe, where compression gains nothing (only the slow hop is worth compressing),
  // so they cost no thread, socket or transport either.
  t_in_init_all = true;
  ncclResult_t r = forward(real_.ncclCommInitAll, "ncclCommInitAll", comm, ndev, devlist);
  t_in_init_all = false;
  return r;
}

ncclResult_t InterposedFront::comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config) {
  auto parent = Runtime::get().find(comm);
  ncclResult_t r = forward(real_.ncclCommSplit, "ncclCommSplit", comm, color, key, newcomm, config);
  if (!started(r) || parent == nullptr || newcomm == nullptr) return r;
  // A nonblocking split leaves *newcomm NULL until NCCL is done: the exchange runs on the
  // parent's proxy without the caller waiting, and the child is adopted on the first call that
  // names the handle NCCL wrote into *newcomm (Runtime::find), after the exchange.
  if (config_nonblocking(config, parent->nonblocking())) {
    auto child = std::make_shared<std::shared_ptr<Communicator>>();
    auto work = parent->submit_split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key, true, child);
    if (color != NCCL_SPLIT_NOCOLOR) Runtime::get().add_pending_child({comm, newcomm, work, child});
    return r;
  }
  // The decision (child or not) is the parent's proxy's, after its join: agreed on every rank,
  // whatever each rank's timing. The real child is known once the real group has ended.
  (void)split_side(*parent, color, key, false,
                   [newcomm](const std::shared_ptr<Communicator>& child) {
                     if (*newcomm != nullptr) {
                       Runtime::get().add(*newcomm, child);
                     } else {
                       child->abort();
                     }
                   });
  return r;  // SketchCCL's side never changes the real result
}

ncclResult_t InterposedFront::comm_shrink(ncclComm_t comm, int* excludeRanksList,
                                          int excludeRanksCount, ncclComm_t* newcomm,
                                          ncclConfig_t* config, int shrinkFlags) {
  // Excluded ranks do not take part, so SketchCCL cannot agree on a ring: the child is forwarded.
  // NCCL_SHRINK_ABORT ends the parent's operations: SketchCCL's side of the parent stops too.
  std::shared_ptr<Communicator> side;
  if ((shrinkFlags & NCCL_SHRINK_ABORT) != 0) side = stop_side(comm);
  ncclResult_t r = forward(real_.ncclCommShrink, "ncclCommShrink", comm, excludeRanksList,
                           excludeRanksCount, newcomm, config, shrinkFlags);
  join_side(std::move(side));
  return r;
}

ncclResult_t InterposedFront::comm_revoke(ncclComm_t comm, int revokeFlags) {
  // A revoked communicator runs nothing more: SketchCCL's side stops as at an abort, so that
  // destroy and finalize find no queued work to wait for.
  auto side = stop_side(comm);
  ncclResult_t r = forward(real_.ncclCommRevoke, "ncclCommRevoke", comm, revokeFlags);
  join_side(std::move(side));
  return r;
}

ncclResult_t InterposedFront::comm_finalize(ncclComm_t comm) {
  // SketchCCL's queued work first (its status is not the caller's: the real result is).
  if (auto c = Runtime::get().find(comm)) (void)c->finalize();
  return forward(real_.ncclCommFinalize, "ncclCommFinalize", comm);
}

ncclResult_t InterposedFront::comm_destroy(ncclComm_t comm) {
  (void)destroy_side(comm);
  drop_node_comm(real_, comm, /*abort=*/false);
  return forward(real_.ncclCommDestroy, "ncclCommDestroy", comm);
}

ncclResult_t InterposedFront::comm_abort(ncclComm_t comm) {
  // The real abort first (it ends NCCL kernels that SketchCCL's device work may wait behind);
  // SketchCCL's side is only signalled before it, and joined, bounded, after it. The node
  // communicator SketchCCL split from this one (docs/hierarchy.md) is aborted with it.
  auto side = stop_side(comm);
  drop_node_comm(real_, comm, /*abort=*/true);
  ncclResult_t r = forward(real_.ncclCommAbort, "ncclCommAbort", comm);
  join_side(std::move(side));
  return r;
}

ncclResult_t InterposedFront::comm_count(const ncclComm_t comm, int* count) {
  return forward(real_.ncclCommCount, "ncclCommCount", comm, count);
}

ncclResult_t InterposedFront::comm_user_rank(const ncclComm_t comm, int* rank) {
  return forward(real_.ncclCommUserRank, "ncclCommUserRank", comm, rank);
}

ncclResult_t InterposedFront::comm_cu_device(const ncclComm_t comm, int* device) {
  return forward(real_.ncclCommCuDevice, "ncclCommCuDevice", comm, device);
}

ncclResult_t InterposedFront::comm_get_async_error(ncclComm_t comm, ncclResult_t* asyncError) {
  // NCCL calls this through the PLT from its own enqueue and init paths: no lock is held here
  // while the real function runs.
  auto c = Runtime::get().find(comm);
  if (real_.ncclCommGetAsyncError == nullptr) return missing_real("ncclCommGetAsyncError");
  // The real result as is: a failure here does not make ncclGetLastError the real one's.
  ncclResult_t r = real_.ncclCommGetAsyncError(comm, asyncError);
  // A failure of a taken-over call is this communicator's error too; a join in progress is not
  // (it is invisible to the caller until its first AllReduce).
  if (r == ncclSuccess && asyncError != nullptr && *asyncError == ncclSuccess && c != nullptr &&
      c->init_work()->done() && c->init_work()->wait().ok()) {
    Status st = c->async_error();
    if (!st.ok() && st.code() != Code::kInProgress && c->configs_agree()) {
      set_last_error(st.message());
      *asyncError = to_nccl(st.code());
    }
  }
  return r;
}

}  // namespace sketchccl::interpose
