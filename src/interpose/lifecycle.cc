// The communicator lifecycle in front of a real NCCL: the real call first, with the caller's
// arguments, and its result returned unchanged; SketchCCL state is added beside the real
// communicator (side table keyed by the real handle) when the id carries a SketchCCL record.
#include <cstring>

#include "src/api/group.h"
#include "src/api/runtime.h"
#include "src/api/side.h"
#include "src/bootstrap/bootstrap.h"
#include "src/core/log.h"
#include "src/interpose/comm_side.h"
#include "src/interpose/forward.h"
#include "src/interpose/front.h"
#include "src/interpose/hierarchy_run.h"

namespace sketchccl::interpose {
namespace {

using api::Runtime;
using coll::Communicator;

// ncclCommInitAll calls ncclGetUniqueId through the PLT: that id must not get a record (its root
// listener would wait for ranks that never come). SketchCCL makes its own id for InitAll.
thread_local bool t_in_init_all = false;

bool started(ncclResult_t r) {
  return r == ncclSuccess || r == ncclInProgress;
}

const uint8_t* id_bytes(const ncclUniqueId& id) {
  return reinterpret_cast<const uint8_t*>(id.internal);
}

}  // namespace

ncclResult_t InterposedFront::ncclGetUniqueId(ncclUniqueId* uniqueId) {
  ncclResult_t r = forward(real_.ncclGetUniqueId, "ncclGetUniqueId", uniqueId);
  Runtime& rt = Runtime::get();
  if (r != ncclSuccess || t_in_init_all || !rt.front_settings().enabled || !rt.config_status().ok())
    return r;
  // NCCL wrote bytes 0-39 and zeroed the rest: the record goes into 40-127.
  Status st = bootstrap::create_root(reinterpret_cast<uint8_t*>(uniqueId->internal),
                                     bootstrap::Options::from_config());
  if (!st.ok()) {
    SCCL_WARN(kLogInit, "no SketchCCL record in this id (%s): its communicator is forwarded",
              st.message().c_str());
  }
  return r;
}

ncclResult_t InterposedFront::ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                               int rank) {
  ncclResult_t r = forward(real_.ncclCommInitRank, "ncclCommInitRank", comm, nranks, commId, rank);
  if (started(r)) attach(*comm, id_bytes(commId), rank, nranks, nonblocking_by_default());
  if (r == ncclSuccess) node_comm_at_init(real_, *comm);
  return r;
}

ncclResult_t InterposedFront::ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config) {
  ncclResult_t r = forward(real_.ncclCommInitRankConfig, "ncclCommInitRankConfig", comm, nranks,
                           commId, rank, config);
  if (started(r)) {
    attach(*comm, id_bytes(commId), rank, nranks, config_nonblocking(config, false));
  }
  if (r == ncclSuccess) node_comm_at_init(real_, *comm);
  return r;
}

ncclResult_t InterposedFront::ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                       int nId, ncclUniqueId* commIds,
                                                       ncclConfig_t* config) {
  ncclResult_t r = forward(real_.ncclCommInitRankScalable, "ncclCommInitRankScalable", newcomm,
                           nranks, myrank, nId, commIds, config);
  // SketchCCL's rendezvous uses the first id only; the root listeners this process started
  // for the others stop now (no rank will ever come to them).
  if (started(r) && nId >= 1 && commIds != nullptr) {
    attach(*newcomm, id_bytes(commIds[0]), myrank, nranks, config_nonblocking(config, false));
    for (int i = 1; i < nId; ++i)
      bootstrap::release_root(id_bytes(commIds[i]));
  }
  if (r == ncclSuccess && newcomm != nullptr) node_comm_at_init(real_, *newcomm);
  return r;
}

ncclResult_t InterposedFront::ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
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

ncclResult_t InterposedFront::ncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  auto parent = Runtime::get().find(comm);
  // A nonblocking split leaves *newcomm NULL until NCCL is done, and NCCL writes it later from
  // its own thread: NCCL gets SketchCCL's slot, relayed to the caller's (relay_split_slot). The
  // exchange runs on the parent's proxy without the caller waiting, and the child is adopted on
  // the first call that names the handle NCCL wrote (Runtime::find), after the exchange. (The
  // parent's mode decides whether NCCL completes the split in the call; the child's, how
  // SketchCCL runs the child.)
  if (parent != nullptr && newcomm != nullptr && parent->nonblocking()) {
    if (color == NCCL_SPLIT_NOCOLOR) {
      // No child: NCCL only ever writes NULL there, and SketchCCL needs no handle.
      ncclResult_t r =
          forward(real_.ncclCommSplit, "ncclCommSplit", comm, color, key, newcomm, config);
      if (started(r)) {
        (void)parent->submit_split(-1, key, true,
                                   std::make_shared<std::shared_ptr<Communicator>>());
      }
      return r;
    }
    std::shared_ptr<ncclComm_t> slot = relay_split_slot(comm, newcomm);
    ncclResult_t r =
        forward(real_.ncclCommSplit, "ncclCommSplit", comm, color, key, slot.get(), config);
    publish_split_slots(comm);
    if (!started(r)) {
      drop_split_slot(slot);  // NCCL failed at once and writes nothing later
      *newcomm = nullptr;
      return r;
    }
    auto child = std::make_shared<std::shared_ptr<Communicator>>();
    auto work = parent->submit_split(color, key, config_nonblocking(config, true), child);
    Runtime::get().add_pending_child({comm, slot, work, child});
    return r;
  }
  ncclResult_t r = forward(real_.ncclCommSplit, "ncclCommSplit", comm, color, key, newcomm, config);
  if (!started(r) || parent == nullptr || newcomm == nullptr) return r;
  // The decision (child or not) is the parent's proxy's, after its join: agreed on every rank,
  // whatever each rank's timing. The real child is known once the real group has ended.
  (void)api::split_side(*parent, color, key, config_nonblocking(config, false),
                        [newcomm](const std::shared_ptr<Communicator>& child) {
                          if (*newcomm != nullptr) {
                            Runtime::get().add(*newcomm, child);
                          } else {
                            child->abort();
                          }
                        });
  // A blocking child outside a group is complete here: its node communicator too, as at init.
  if (r == ncclSuccess && !api::group::active() && *newcomm != nullptr) {
    node_comm_at_init(real_, *newcomm);
  }
  return r;  // SketchCCL's side never changes the real result
}

ncclResult_t InterposedFront::ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                             int excludeRanksCount, ncclComm_t* newcomm,
                                             ncclConfig_t* config, int shrinkFlags) {
  // Excluded ranks do not take part, so SketchCCL cannot agree on a ring: the child is forwarded.
  // NCCL_SHRINK_ABORT ends the parent's operations: SketchCCL's side of the parent stops too.
  std::shared_ptr<Communicator> side;
  if ((shrinkFlags & NCCL_SHRINK_ABORT) != 0) side = api::stop_side(comm);
  ncclResult_t r = forward(real_.ncclCommShrink, "ncclCommShrink", comm, excludeRanksList,
                           excludeRanksCount, newcomm, config, shrinkFlags);
  api::join_side(std::move(side));
  return r;
}

ncclResult_t InterposedFront::ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  // A revoked communicator runs nothing more: SketchCCL's side stops as at an abort, so that
  // destroy and finalize find no queued work to wait for.
  auto side = api::stop_side(comm);
  ncclResult_t r = forward(real_.ncclCommRevoke, "ncclCommRevoke", comm, revokeFlags);
  api::join_side(std::move(side));
  return r;
}

ncclResult_t InterposedFront::ncclCommFinalize(ncclComm_t comm) {
  // SketchCCL's queued work first (its status is not the caller's: the real result is).
  if (auto c = Runtime::get().find(comm)) (void)c->finalize();
  return forward(real_.ncclCommFinalize, "ncclCommFinalize", comm);
}

ncclResult_t InterposedFront::ncclCommDestroy(ncclComm_t comm) {
  (void)api::destroy_side(comm);
  drop_node_comm(real_, comm, /*abort=*/false);
  forget_device_path(comm);
  return forward(real_.ncclCommDestroy, "ncclCommDestroy", comm);
}

ncclResult_t InterposedFront::ncclCommAbort(ncclComm_t comm) {
  // The real abort first (it ends NCCL kernels that SketchCCL's device work may wait behind);
  // SketchCCL's side is only signalled before it, and joined, bounded, after it. The node
  // communicator SketchCCL split from this one (docs/hierarchy.md) is aborted with it.
  auto side = api::stop_side(comm);
  drop_node_comm(real_, comm, /*abort=*/true);
  forget_device_path(comm);
  ncclResult_t r = forward(real_.ncclCommAbort, "ncclCommAbort", comm);
  api::join_side(std::move(side));
  return r;
}

}  // namespace sketchccl::interpose
