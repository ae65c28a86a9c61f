// The communicator lifecycle without a real NCCL: SketchCCL's own ids, handles (addresses it
// owns) and communicators.
#include <cstddef>
#include <cstring>
#include <random>

#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/api/side.h"
#include "src/backend/cuda_query.h"
#include "src/standalone/front.h"

namespace sketchccl::standalone {
namespace {

using api::report;
using api::Runtime;
using coll::Communicator;

// Reads the caller's ncclConfig_t by its own size and version, never past them.
struct CallerConfig {
  bool blocking = true;
};
Status read_config(const ncclConfig_t* config, CallerConfig* out) {
  if (config == nullptr) return Status::Ok();
  size_t size = 0;
  std::memcpy(&size, config, sizeof size);
  if (size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return errorf(Code::kInvalidArgument, "ncclConfig_t.size %zu is too small", size);
  }
  unsigned magic = 0;
  std::memcpy(&magic, reinterpret_cast<const char*>(config) + offsetof(ncclConfig_t, magic),
              sizeof magic);
  if (magic != 0xcafebeef) {
    return errorf(Code::kInvalidArgument,
                  "ncclConfig_t magic 0x%x is not 0xcafebeef: initialise it with "
                  "NCCL_CONFIG_INITIALIZER",
                  magic);
  }
  int blocking = 1;
  std::memcpy(&blocking, reinterpret_cast<const char*>(config) + offsetof(ncclConfig_t, blocking),
              sizeof blocking);
  out->blocking = blocking != 0;  // NCCL_CONFIG_UNDEF_INT means the default: blocking
  return Status::Ok();
}

// Init of one rank.
ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                       const CallerConfig& cc, const char* api) {
  if (comm == nullptr) return report(Status(Code::kInvalidArgument, "comm is NULL"), api);
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return report(errorf(Code::kInvalidArgument, "rank %d is outside [0, nranks=%d)", rank, nranks),
                  api);
  }
  Runtime& rt = Runtime::get();
  if (!rt.config_status().ok()) return report(rt.config_status(), api);
  Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id.internal, coll::kIdBytes);
  args.cuda_device = backend::current_cuda_device();  // 0 without a device
  args.nonblocking = !cc.blocking;
  auto c = Communicator::create(args, rt.settings(), rt.config_hash());
  ncclComm_t handle = rt.add_owned(c);
  *comm = handle;
  if (api::group::active()) {
    api::group::defer(c->init_work(), !cc.blocking);
    return ncclSuccess;
  }
  if (!cc.blocking) return ncclInProgress;
  Status st = c->init_work()->wait();
  if (!st.ok()) {
    rt.remove(handle);
    c->abort();
    *comm = nullptr;
  }
  return report(st, api);
}

ncclResult_t not_live(const char* api) {
  return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), api);
}

}  // namespace

ncclResult_t StandaloneFront::ncclGetVersion(int* version) {
  if (version == nullptr) {
    return report(Status(Code::kInvalidArgument, "version is NULL"), "ncclGetVersion");
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) {
    return report(Status(Code::kInvalidArgument, "uniqueId is NULL"), "ncclGetUniqueId");
  }
  Runtime& rt = Runtime::get();
  if (!rt.config_status().ok()) return report(rt.config_status(), "ncclGetUniqueId");
  coll::UniqueId id{};
  // Bytes 0-39 stand where NCCL's handle would: random, so ids differ.
  std::random_device rd;
  for (size_t i = 0; i < 40; i += 4) {
    uint32_t v = rd();
    std::memcpy(id.data() + i, &v, 4);
  }
  Status st = Communicator::bootstrap_make_id(&id);
  if (!st.ok()) return report(st, "ncclGetUniqueId");
  std::memcpy(uniqueId->internal, id.data(), coll::kIdBytes);
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                               int rank) {
  return init_rank(comm, nranks, commId, rank, CallerConfig{}, "ncclCommInitRank");
}

ncclResult_t StandaloneFront::ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config) {
  CallerConfig cc;
  Status st = read_config(config, &cc);
  if (!st.ok()) return report(st, "ncclCommInitRankConfig");
  return init_rank(comm, nranks, commId, rank, cc, "ncclCommInitRankConfig");
}

ncclResult_t StandaloneFront::ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                       int nId, ncclUniqueId* commIds,
                                                       ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    return report(Status(Code::kInvalidArgument, "nId < 1 or commIds is NULL"),
                  "ncclCommInitRankScalable");
  }
  CallerConfig cc;
  Status st = read_config(config, &cc);
  if (!st.ok()) return report(st, "ncclCommInitRankScalable");
  return init_rank(newcomm, nranks, commIds[0], myrank, cc, "ncclCommInitRankScalable");
}

ncclResult_t StandaloneFront::ncclCommInitAll(ncclComm_t* comm, int ndev, const int* /*devlist*/) {
  if (comm == nullptr || ndev < 1) {
    return report(errorf(Code::kInvalidArgument, "comms is NULL or ndev %d < 1", ndev),
                  "ncclCommInitAll");
  }
  ncclUniqueId id;
  ncclResult_t r = this->ncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  api::group::start();
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < ndev; ++i) {
    r = this->ncclCommInitRank(&comm[i], ndev, id, i);
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  }
  Status st = api::group::end();
  if (first != ncclSuccess) return first;
  return report(st, "ncclCommInitAll");
}

ncclResult_t StandaloneFront::ncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  auto parent = Runtime::get().find(comm);
  if (parent == nullptr) return not_live("ncclCommSplit");
  if (newcomm == nullptr) {
    return report(Status(Code::kInvalidArgument, "newcomm is NULL"), "ncclCommSplit");
  }
  CallerConfig cc;
  Status st = read_config(config, &cc);
  if (!st.ok()) return report(st, "ncclCommSplit");
  *newcomm = nullptr;
  // A NULL config inherits the parent's blocking mode, as NCCL's split does.
  const bool child_nonblocking = config != nullptr ? !cc.blocking : parent->nonblocking();
  api::SplitOutcome split = api::split_side(*parent, color, key, child_nonblocking,
                                            [newcomm](const std::shared_ptr<Communicator>& child) {
                                              *newcomm = Runtime::get().add_owned(child);
                                            });
  if (split.deferred) return ncclSuccess;
  st = split.status;
  if (st.ok() && split.child) {
    if (child_nonblocking) return ncclInProgress;
    st = split.child->init_work()->wait();
  }
  return report(st, "ncclCommSplit");
}

ncclResult_t StandaloneFront::ncclCommFinalize(ncclComm_t comm) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr) return not_live("ncclCommFinalize");
  return report(c->finalize(), "ncclCommFinalize");
}

ncclResult_t StandaloneFront::ncclCommDestroy(ncclComm_t comm) {
  api::Detached d = api::destroy_side(comm);
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  if (!d.found) return not_live("ncclCommDestroy");
  return report(d.status, "ncclCommDestroy");
}

ncclResult_t StandaloneFront::ncclCommAbort(ncclComm_t comm) {
  const bool found = api::abort_side(comm);
  if (comm != nullptr && !found) return not_live("ncclCommAbort");
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommCount(const ncclComm_t comm, int* count) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr || count == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or count is NULL"),
                  "ncclCommCount");
  }
  *count = c->nranks();
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommUserRank(const ncclComm_t comm, int* rank) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr || rank == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or rank is NULL"),
                  "ncclCommUserRank");
  }
  *rank = c->rank();
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclCommCuDevice(const ncclComm_t comm, int* device) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr || device == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or device is NULL"),
                  "ncclCommCuDevice");
  }
  *device = c->cuda_device();
  return ncclSuccess;
}

}  // namespace sketchccl::standalone
