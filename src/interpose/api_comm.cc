// Communicator lifecycle of the NCCL API.
// Standalone: SketchCCL's own ids, handles and communicators.
// In front of a real NCCL: the real call first, with the caller's arguments, and its result
// returned unchanged; SketchCCL state is added beside the real communicator (side table keyed by
// the real handle) when the id carries a SketchCCL record.
#include <nccl.h>

#include <cstring>
#include <random>

#include "backend/cuda_query.h"
#include "bootstrap/bootstrap.h"
#include "core/config.h"
#include "core/log.h"
#include "interpose/exports.h"
#include "interpose/forward.h"
#include "interpose/group.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

using coll::Communicator;

// ncclCommInitAll calls ncclGetUniqueId through the PLT: that id must not get a record (its root
// listener would wait for ranks that never come). SketchCCL makes its own id for InitAll.
thread_local bool t_in_init_all = false;

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

bool enabled() {
  return Config::global().get_bool(Var::kEnable);
}

// Starts SketchCCL's side of a communicator whose real twin exists (forward mode).
void attach(ncclComm_t real, const uint8_t* id, int rank, int nranks) {
  if (real == nullptr || !enabled() || !bootstrap::has_record(id)) return;
  Runtime& rt = Runtime::get();
  if (!rt.config_status().ok()) return;  // logged once at load: forwarded
  Communicator::InitArgs args;
  args.rank = rank;
  args.nranks = nranks;
  std::memcpy(args.id.data(), id, coll::kIdBytes);
  args.standalone = false;
  // The communicator's device: the real communicator's (ncclCommInitAll gives each its own),
  // else the caller's current one, as NCCL takes it at init.
  args.cuda_device = backend::current_cuda_device();
  if (backend::has_cuda_backend()) {
    auto cu = real_fn<decltype(&pncclCommCuDevice)>("pncclCommCuDevice");
    int dev = -1;
    if (cu != nullptr && cu(real, &dev) == ncclSuccess && dev >= 0) args.cuda_device = dev;
  }
  rt.add(real, Communicator::create(args, rt.settings(), rt.config_hash()));
}

// Standalone init of one rank.
ncclResult_t init_rank_standalone(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
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
  args.cuda_device = backend::current_cuda_device();  // 0 without a device, as before
  auto c = Communicator::create(args, rt.settings(), rt.config_hash());
  ncclComm_t handle = rt.add_owned(c);
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

ncclResult_t not_live(const char* api) {
  return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), api);
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

SCCL_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* unique_id){SCCL_API_GUARD(
    "ncclGetUniqueId",
    {
      Runtime& rt = Runtime::get();
      if (!rt.standalone()) {
        auto real = real_fn<decltype(&pncclGetUniqueId)>("pncclGetUniqueId");
        if (real == nullptr) return missing_real("ncclGetUniqueId");
        ncclResult_t r = forwarded(real(unique_id));
        if (r != ncclSuccess || t_in_init_all || !enabled() || !rt.config_status().ok()) return r;
        // NCCL wrote bytes 0-39 and zeroed the rest: the record goes into 40-127.
        Status st = bootstrap::create_root(reinterpret_cast<uint8_t*>(unique_id->internal),
                                           bootstrap::Options::from_config());
        if (!st.ok()) {
          SCCL_WARN(kLogInit, "no SketchCCL record in this id (%s): its communicator is forwarded",
                    st.message().c_str());
        }
        return r;
      }
      if (unique_id == nullptr) {
        return report(Status(Code::kInvalidArgument, "uniqueId is NULL"), "ncclGetUniqueId");
      }
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
      std::memcpy(unique_id->internal, id.data(), coll::kIdBytes);
      return ncclSuccess;
    })}

SCCL_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId,
              int rank){SCCL_API_GUARD(
    "ncclCommInitRank",
    {
      if (!Runtime::get().standalone()) {
        auto real = real_fn<decltype(&pncclCommInitRank)>("pncclCommInitRank");
        if (real == nullptr) return missing_real("ncclCommInitRank");
        ncclResult_t r = forwarded(real(comm, nranks, commId, rank));
        if (r == ncclSuccess || r == ncclInProgress) {
          attach(*comm, reinterpret_cast<const uint8_t*>(commId.internal), rank, nranks);
        }
        return r;
      }
      return init_rank_standalone(comm, nranks, commId, rank, CallerConfig{}, "ncclCommInitRank");
    })}

SCCL_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks,
              ncclUniqueId commId, int rank, ncclConfig_t* config){SCCL_API_GUARD(
    "ncclCommInitRankConfig",
    {
      if (!Runtime::get().standalone()) {
        auto real = real_fn<decltype(&pncclCommInitRankConfig)>("pncclCommInitRankConfig");
        if (real == nullptr) return missing_real("ncclCommInitRankConfig");
        ncclResult_t r = forwarded(real(comm, nranks, commId, rank, config));
        if (r == ncclSuccess || r == ncclInProgress) {
          attach(*comm, reinterpret_cast<const uint8_t*>(commId.internal), rank, nranks);
        }
        return r;
      }
      CallerConfig cc;
      Status st = read_config(config, &cc);
      if (!st.ok()) return report(st, "ncclCommInitRankConfig");
      return init_rank_standalone(comm, nranks, commId, rank, cc, "ncclCommInitRankConfig");
    })}

SCCL_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
              int nId, ncclUniqueId* commIds, ncclConfig_t* config){SCCL_API_GUARD(
    "ncclCommInitRankScalable",
    {
      if (!Runtime::get().standalone()) {
        auto real = real_fn<decltype(&pncclCommInitRankScalable)>("pncclCommInitRankScalable");
        if (real == nullptr) return missing_real("ncclCommInitRankScalable");
        ncclResult_t r = forwarded(real(newcomm, nranks, myrank, nId, commIds, config));
        // SketchCCL's rendezvous uses the first id only.
        if ((r == ncclSuccess || r == ncclInProgress) && nId >= 1 && commIds != nullptr) {
          attach(*newcomm, reinterpret_cast<const uint8_t*>(commIds[0].internal), myrank, nranks);
        }
        return r;
      }
      if (nId < 1 || commIds == nullptr) {
        return report(Status(Code::kInvalidArgument, "nId < 1 or commIds is NULL"),
                      "ncclCommInitRankScalable");
      }
      CallerConfig cc;
      Status st = read_config(config, &cc);
      if (!st.ok()) return report(st, "ncclCommInitRankScalable");
      return init_rank_standalone(newcomm, nranks, commIds[0], myrank, cc,
                                  "ncclCommInitRankScalable");
    })}

SCCL_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist){
    SCCL_API_GUARD("ncclCommInitAll",
                   {
                     Runtime& rt = Runtime::get();
                     if (!rt.standalone()) {
                       auto real = real_fn<decltype(&pncclCommInitAll)>("pncclCommInitAll");
                       if (real == nullptr) return missing_real("ncclCommInitAll");
                       t_in_init_all = true;
                       ncclResult_t r = forwarded(real(comms, ndev, devlist));
                       t_in_init_all = false;
                       if (r != ncclSuccess || !enabled() || !rt.config_status().ok()) return r;
                       coll::UniqueId id{};
                       Status st = Communicator::bootstrap_make_id(&id);
                       if (!st.ok()) {
                         SCCL_WARN(kLogInit, "ncclCommInitAll: no SketchCCL state (%s)",
                                   st.message().c_str());
                         return r;
                       }
                       for (int i = 0; i < ndev; ++i)
                         attach(comms[i], id.data(), i, ndev);
                       return r;
                     }
                     if (comms == nullptr || ndev < 1) {
                       return report(
                           errorf(Code::kInvalidArgument, "comms is NULL or ndev %d < 1", ndev),
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
                     return report(st, "ncclCommInitAll");
                   })}

SCCL_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
              ncclConfig_t* config){SCCL_API_GUARD(
    "ncclCommSplit",
    {
      Runtime& rt = Runtime::get();
      auto parent = rt.find(comm);
      ncclResult_t real_result = ncclSuccess;
      CallerConfig cc;
      if (!rt.standalone()) {
        auto real = real_fn<decltype(&pncclCommSplit)>("pncclCommSplit");
        if (real == nullptr) return missing_real("ncclCommSplit");
        real_result = forwarded(real(comm, color, key, newcomm, config));
        if (real_result != ncclSuccess && real_result != ncclInProgress) return real_result;
        // A parent without a working ring gives children without SketchCCL state.
        if (parent == nullptr || !parent->init_work()->done() || !parent->async_error().ok() ||
            !parent->configs_agree()) {
          return real_result;
        }
      } else {
        if (parent == nullptr) return not_live("ncclCommSplit");
        if (newcomm == nullptr) {
          return report(Status(Code::kInvalidArgument, "newcomm is NULL"), "ncclCommSplit");
        }
        Status st = read_config(config, &cc);
        if (!st.ok()) return report(st, "ncclCommSplit");
        *newcomm = nullptr;
      }
      // Membership from the parent: an all-gather of (color, key) over its ring.
      auto child = std::make_shared<std::shared_ptr<Communicator>>();
      auto work = parent->submit_split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key, child.get());
      const bool standalone = rt.standalone();
      auto finish = [newcomm, child, standalone](const Status& s) {
        if (!s.ok() || !*child) return;
        Runtime& r = Runtime::get();
        if (standalone) {
          *newcomm = r.add_owned(*child);
        } else if (*newcomm != nullptr) {
          r.add(*newcomm, *child);  // the real child is known once the real group has ended
        } else {
          (*child)->abort();
        }
      };
      if (group::active()) {
        group::defer(work, false, [finish, child](const Status& s) {
          finish(s);
          // A failed join shows in the child's ncclCommGetAsyncError.
          if (s.ok() && *child) (void)(*child)->init_work()->wait();
        });
        return standalone ? ncclSuccess : real_result;
      }
      Status st = work->wait();
      finish(st);
      if (!standalone) return real_result;  // SketchCCL's side never changes the real result
      if (st.ok() && *child) {
        if (!cc.blocking) return ncclInProgress;
        st = (*child)->init_work()->wait();
      }
      return report(st, "ncclCommSplit");
    })}

SCCL_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
              int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  // Excluded ranks do not take part, so SketchCCL cannot agree on a ring: the child is forwarded.
  SCCL_FORWARD(ncclCommShrink,
               (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
  return not_in_standalone("ncclCommShrink");
}

SCCL_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm){
    SCCL_API_GUARD("ncclCommFinalize",
                   {
                     Runtime& rt = Runtime::get();
                     auto c = rt.find(comm);
                     Status st = c != nullptr ? c->finalize() : Status::Ok();
                     if (!rt.standalone()) {
                       SCCL_FORWARD(ncclCommFinalize, (comm));
                     }
                     if (c == nullptr) return not_live("ncclCommFinalize");
                     return report(st, "ncclCommFinalize");
                   })}

SCCL_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm){
    SCCL_API_GUARD("ncclCommDestroy",
                   {
                     Runtime& rt = Runtime::get();
                     auto c = comm != nullptr ? rt.remove(comm) : nullptr;
                     Status st = Status::Ok();
                     if (c != nullptr) {
                       st = c->finalize();
                       rt.write_stats(*c);
                     }
                     SCCL_FORWARD(ncclCommDestroy, (comm));
                     if (comm == nullptr)
                       return ncclSuccess;  // as NCCL: destroying NULL is a no-op
                     if (c == nullptr) return not_live("ncclCommDestroy");
                     return report(st, "ncclCommDestroy");
                   })}

SCCL_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm){
    SCCL_API_GUARD("ncclCommAbort",
                   {
                     Runtime& rt = Runtime::get();
                     auto c = comm != nullptr ? rt.remove(comm) : nullptr;
                     if (c != nullptr) {
                       c->abort();
                       rt.write_stats(*c);
                     }
                     SCCL_FORWARD(ncclCommAbort, (comm));
                     if (comm != nullptr && c == nullptr) return not_live("ncclCommAbort");
                     return ncclSuccess;
                   })}

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
  // NCCL calls this through the PLT from its own enqueue and init paths: no lock is held here
  // while the real function runs.
  Runtime& rt = Runtime::get();
  auto c = rt.find(comm);
  if (!rt.standalone()) {
    auto real = real_fn<decltype(&pncclCommGetAsyncError)>("pncclCommGetAsyncError");
    if (real == nullptr) return missing_real("ncclCommGetAsyncError");
    ncclResult_t r = real(comm, asyncError);
    // A failure of a taken-over call is this communicator's error too; a join in progress is not
    // (it is invisible to the caller until its first AllReduce).
    if (r == ncclSuccess && asyncError != nullptr && *asyncError == ncclSuccess && c != nullptr &&
        c->init_work()->done() && c->init_work()->wait().ok()) {
      Status st = c->async_error();
      if (!st.ok() && st.code() != Code::kInProgress && c->configs_agree()) {
        set_last_error(st.message());
        *asyncError = static_cast<ncclResult_t>(st.code());
      }
    }
    return r;
  }
  if (c == nullptr || asyncError == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not live or asyncError is NULL"),
                  "ncclCommGetAsyncError");
  }
  Status st = c->async_error();
  if (!st.ok() && st.code() != Code::kInProgress) set_last_error(st.message());
  *asyncError = static_cast<ncclResult_t>(st.code());
  return ncclSuccess;
}
