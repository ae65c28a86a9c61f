// Communicator lifecycle of the NCCL API. Standalone: SketchCCL's own communicators. In front of
// a real NCCL: forwarded (the interposition issue adds the side table there).
#include <nccl.h>

#include <cstring>
#include <random>

#include "core/log.h"
#include "interpose/exports.h"
#include "interpose/forward.h"
#include "interpose/group.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

using coll::Communicator;

// Reads the caller's ncclConfig_t by its own size and version, never past them.
struct CallerConfig {
  bool blocking = true;
};
Status read_config(const ncclConfig_t* config, CallerConfig* out) {
  if (config == nullptr) return Status::Ok();
  size_t size = 0;
  std::memcpy(&size, config, sizeof size);
  unsigned magic = 0;
  if (size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return errorf(Code::kInvalidArgument, "ncclConfig_t.size %zu is too small", size);
  }
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
  // NCCL_CONFIG_UNDEF_INT means "default", which is blocking.
  out->blocking = blocking != 0;
  return Status::Ok();
}

Status check_ready() {
  Runtime& rt = Runtime::get();
  return rt.config_status();
}

ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                       const CallerConfig& cc, const char* api) {
  if (comm == nullptr) return report(Status(Code::kInvalidArgument, "comm is NULL"), api);
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return report(errorf(Code::kInvalidArgument, "rank %d is outside [0, nranks=%d)", rank, nranks),
                  api);
  }
  Status ready = check_ready();
  if (!ready.ok()) return report(ready, api);
  Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id.internal, coll::kIdBytes);
  args.cuda_device = 0;
  Runtime& rt = Runtime::get();
  auto c = Communicator::create(args, rt.settings(), rt.config_hash());
  ncclComm_t handle = rt.add(c);
  *comm = handle;
  if (group::active()) {
    group::defer(c->init_work(), !cc.blocking);
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

}  // namespace
}  // namespace sketchccl::interpose

using namespace sketchccl;             // NOLINT: the exported C functions below
using namespace sketchccl::interpose;  // NOLINT

SCCL_NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  SCCL_FORWARD(ncclGetVersion, (version));
  if (version == nullptr)
    return report(Status(Code::kInvalidArgument, "version is NULL"), __func__);
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* unique_id) {
  SCCL_FORWARD(ncclGetUniqueId, (unique_id));
  SCCL_API_GUARD("ncclGetUniqueId", {
    if (unique_id == nullptr) {
      return report(Status(Code::kInvalidArgument, "uniqueId is NULL"), "ncclGetUniqueId");
    }
    Status ready = check_ready();
    if (!ready.ok()) return report(ready, "ncclGetUniqueId");
    coll::UniqueId id{};
    // Bytes 0-39 stand where NCCL's handle would: random, so ids differ.
    std::random_device rd;
    for (size_t i = 0; i < 40; i += 4) {
      uint32_t v = rd();
      std::memcpy(id.data() + i, &v, 4);
    }
    Status st = Communicator::bootstrap_make_id(&id);
    if (!st.ok()) return report(st, "ncclGetUniqueId");
    std::memcpy(unique_id->internal, id.data(), coll::kIdBytes);
    return ncclSuccess;
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId,
              int rank) {
  SCCL_FORWARD(ncclCommInitRank, (comm, nranks, commId, rank));
  SCCL_API_GUARD("ncclCommInitRank", {
    return init_rank(comm, nranks, commId, rank, CallerConfig{}, "ncclCommInitRank");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks,
              ncclUniqueId commId, int rank, ncclConfig_t* config) {
  SCCL_FORWARD(ncclCommInitRankConfig, (comm, nranks, commId, rank, config));
  SCCL_API_GUARD("ncclCommInitRankConfig", {
    CallerConfig cc;
    Status st = read_config(config, &cc);
    if (!st.ok()) return report(st, "ncclCommInitRankConfig");
    return init_rank(comm, nranks, commId, rank, cc, "ncclCommInitRankConfig");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  SCCL_FORWARD(ncclCommInitAll, (comms, ndev, devlist));
  SCCL_API_GUARD("ncclCommInitAll", {
    if (comms == nullptr || ndev < 1) {
      return report(errorf(Code::kInvalidArgument, "comms is NULL or ndev %d < 1", ndev),
                    "ncclCommInitAll");
    }
    ncclUniqueId id;
    ncclResult_t r = pncclGetUniqueId(&id);
    if (r != ncclSuccess) return r;
    group::start();
    ncclResult_t first = ncclSuccess;
    for (int i = 0; i < ndev; ++i) {
      r = pncclCommInitRank(&comms[i], ndev, id, i);
      if (r != ncclSuccess && first == ncclSuccess) first = r;
    }
    Status st = group::end();
    if (first != ncclSuccess) return first;
    if (devlist != nullptr) {
      for (int i = 0; i < ndev; ++i)
        (void)devlist[i];  // devices are recorded by the CUDA backend
    }
    return report(st, "ncclCommInitAll");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
              ncclConfig_t* config) {
  SCCL_FORWARD(ncclCommSplit, (comm, color, key, newcomm, config));
  SCCL_API_GUARD("ncclCommSplit", {
    Runtime& rt = Runtime::get();
    auto parent = rt.find(comm);
    if (parent == nullptr) {
      return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                    "ncclCommSplit");
    }
    if (newcomm == nullptr) {
      return report(Status(Code::kInvalidArgument, "newcomm is NULL"), "ncclCommSplit");
    }
    CallerConfig cc;
    Status st = read_config(config, &cc);
    if (!st.ok()) return report(st, "ncclCommSplit");
    *newcomm = nullptr;
    auto child = std::make_shared<std::shared_ptr<Communicator>>();
    auto work = parent->submit_split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key, child.get());
    // The child is known once every rank of the parent has called split; then it joins.
    auto finish = [newcomm, child](const Status& s) {
      if (s.ok() && *child) *newcomm = Runtime::get().add(*child);
    };
    if (group::active()) {
      group::defer(work, false, [finish, child](const Status& s) {
        finish(s);
        // A failed join shows in the child's ncclCommGetAsyncError.
        if (s.ok() && *child) (void)(*child)->init_work()->wait();
      });
      return ncclSuccess;
    }
    st = work->wait();
    finish(st);
    if (st.ok() && *child) {
      if (!cc.blocking) return ncclInProgress;
      st = (*child)->init_work()->wait();
    }
    return report(st, "ncclCommSplit");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  SCCL_FORWARD(ncclCommFinalize, (comm));
  SCCL_API_GUARD("ncclCommFinalize", {
    auto c = Runtime::get().find(comm);
    if (c == nullptr) {
      return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                    "ncclCommFinalize");
    }
    return report(c->finalize(), "ncclCommFinalize");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  SCCL_FORWARD(ncclCommDestroy, (comm));
  SCCL_API_GUARD("ncclCommDestroy", {
    if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
    Runtime& rt = Runtime::get();
    auto c = rt.remove(comm);
    if (c == nullptr) {
      return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                    "ncclCommDestroy");
    }
    Status st = c->finalize();
    rt.write_stats(*c);
    return report(st, "ncclCommDestroy");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  SCCL_FORWARD(ncclCommAbort, (comm));
  SCCL_API_GUARD("ncclCommAbort", {
    if (comm == nullptr) return ncclSuccess;
    Runtime& rt = Runtime::get();
    auto c = rt.remove(comm);
    if (c == nullptr) {
      return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                    "ncclCommAbort");
    }
    c->abort();
    rt.write_stats(*c);
    return ncclSuccess;
  })
}

SCCL_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  SCCL_FORWARD(ncclCommCount, (comm, count));
  auto c = Runtime::get().find(comm);
  if (c == nullptr || count == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or count is NULL"),
                  "ncclCommCount");
  }
  *count = c->nranks();
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  SCCL_FORWARD(ncclCommUserRank, (comm, rank));
  auto c = Runtime::get().find(comm);
  if (c == nullptr || rank == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or rank is NULL"),
                  "ncclCommUserRank");
  }
  *rank = c->rank();
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  SCCL_FORWARD(ncclCommCuDevice, (comm, device));
  auto c = Runtime::get().find(comm);
  if (c == nullptr || device == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or device is NULL"),
                  "ncclCommCuDevice");
  }
  *device = c->cuda_device();
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  SCCL_FORWARD(ncclCommGetAsyncError, (comm, asyncError));
  auto c = Runtime::get().find(comm);
  if (c == nullptr || asyncError == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or asyncError is NULL"),
                  "ncclCommGetAsyncError");
  }
  Status st = c->async_error();
  if (!st.ok() && st.code() != Code::kInProgress) set_last_error(st.message());
  *asyncError = static_cast<ncclResult_t>(st.code());
  return ncclSuccess;
}
