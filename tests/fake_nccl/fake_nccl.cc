// A fake libnccl.so.2 for checking what SketchCCL forwards. It implements the nccl.h functions
// (and the device API's host functions, when the nccl.h built against has them) on host memory
// without communicating, appends one line per call with its arguments to
// $FAKE_NCCL_LOG, and, as the real library does, calls some of its own exported functions
// through the PLT (ncclGetUniqueId from ncclCommInitAll, ncclBroadcast from ncclBcast,
// ncclCommGetAsyncError from init and enqueue), so a preloaded shim sees those calls too.
// Forwarded collectives copy sendbuff to recvbuff: their result is recognisably not a sum.
#include <nccl.h>
#include <unistd.h>

#include "sketchccl_build_config.h"
#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#define FAKE_API(ret, name, ...)                                                                   \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__);                      \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__); \
  extern "C" ret p##name(__VA_ARGS__)

namespace {

struct FakeComm {
  uint32_t magic = 0xfa4ec033;
  int rank = 0;
  int nranks = 1;
};

std::mutex g_mu;
std::atomic<int> g_next_op{ncclNumOps};

void log_call(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_call(const char* fmt, ...) {
  const char* path = std::getenv("FAKE_NCCL_LOG");
  if (path == nullptr) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line);
    std::fclose(f);
  }
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

void copy(const void* src, void* dst, size_t count, ncclDataType_t t) {
  if (src != nullptr && dst != nullptr && src != dst) std::memmove(dst, src, count * type_size(t));
}

ncclResult_t new_comm(ncclComm_t* comm, int nranks, int rank) {
  if (comm == nullptr) return ncclInvalidArgument;
  auto* c = new FakeComm();
  c->rank = rank;
  c->nranks = nranks;
  *comm = reinterpret_cast<ncclComm_t>(c);
  ncclResult_t async = ncclSuccess;
  return ncclCommGetAsyncError(*comm, &async);  // through the PLT, as NCCL's init does
}

ncclResult_t enqueue_check(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  return ncclCommGetAsyncError(comm, &async);  // through the PLT, as NCCL's enqueue does
}

}  // namespace

FAKE_API(ncclResult_t, ncclGetVersion, int* version) {
  log_call("ncclGetVersion");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* id) {
  log_call("ncclGetUniqueId");
  std::memset(id->internal, 0, sizeof id->internal);
  FILE* r = std::fopen("/dev/urandom", "rb");
  if (r == nullptr || std::fread(id->internal, 1, 40, r) != 40) {
    if (r) std::fclose(r);
    return ncclSystemError;
  }
  std::fclose(r);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  log_call("ncclCommInitRank nranks=%d rank=%d id0=%02x", nranks, rank,
           static_cast<unsigned char>(id.internal[0]));
  return new_comm(comm, nranks, rank);
}

FAKE_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId id,
         int rank, ncclConfig_t* config) {
  log_call("ncclCommInitRankConfig nranks=%d rank=%d id0=%02x blocking=%d", nranks, rank,
           static_cast<unsigned char>(id.internal[0]), config ? config->blocking : -1);
  return new_comm(comm, nranks, rank);
}

FAKE_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* comm, int nranks, int myrank, int nId,
         ncclUniqueId* ids, ncclConfig_t* config) {
  log_call("ncclCommInitRankScalable nranks=%d rank=%d nId=%d config=%p", nranks, myrank, nId,
           static_cast<void*>(config));
  (void)ids;
  return new_comm(comm, nranks, myrank);
}

FAKE_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  log_call("ncclCommInitAll ndev=%d devlist=%p", ndev, static_cast<const void*>(devlist));
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);  // through the PLT, as NCCL does
  if (r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) {
    auto* c = new FakeComm();
    c->rank = i;
    c->nranks = ndev;
    comms[i] = reinterpret_cast<ncclComm_t>(c);
  }
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  log_call("ncclCommFinalize comm=%p", static_cast<void*>(comm));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  log_call("ncclCommDestroy comm=%p", static_cast<void*>(comm));
  delete reinterpret_cast<FakeComm*>(comm);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  log_call("ncclCommAbort comm=%p", static_cast<void*>(comm));
  delete reinterpret_cast<FakeComm*>(comm);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int flags) {
  log_call("ncclCommRevoke comm=%p flags=%d", static_cast<void*>(comm), flags);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
         ncclConfig_t* config) {
  log_call("ncclCommSplit comm=%p color=%d key=%d config=%p", static_cast<void*>(comm), color, key,
           static_cast<void*>(config));
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  auto* parent = reinterpret_cast<FakeComm*>(comm);
  if (config != nullptr && config->blocking == 0) {
    // As NCCL: a nonblocking split returns at once and writes *newcomm from another thread
    // once the child is ready.
    std::thread([newcomm, nranks = parent->nranks, rank = parent->rank] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ncclComm_t c = nullptr;
      (void)new_comm(&c, nranks, rank);
      __atomic_store_n(newcomm, c, __ATOMIC_RELEASE);
    }).detach();
    return ncclInProgress;
  }
  return new_comm(newcomm, parent->nranks, parent->rank);  // sizes are not faked precisely
}

FAKE_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* exclude, int nexclude,
         ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  log_call("ncclCommShrink comm=%p exclude=%p n=%d config=%p flags=%d", static_cast<void*>(comm),
           static_cast<void*>(exclude), nexclude, static_cast<void*>(config), flags);
  auto* parent = reinterpret_cast<FakeComm*>(comm);
  return new_comm(newcomm, parent->nranks - nexclude, parent->rank);
}

FAKE_API(const char*, ncclGetErrorString, ncclResult_t result) {
  log_call("ncclGetErrorString result=%d", static_cast<int>(result));
  static thread_local char text[64];
  std::snprintf(text, sizeof text, "fake error string %d", static_cast<int>(result));
  return text;
}

FAKE_API(const char*, ncclGetLastError, ncclComm_t comm) {
  log_call("ncclGetLastError comm=%p", static_cast<void*>(comm));
  return "fake last error";
}

FAKE_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* err) {
  log_call("ncclCommGetAsyncError comm=%p", static_cast<void*>(comm));
  *err = ncclSuccess;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  log_call("ncclCommCount comm=%p", static_cast<void*>(comm));
  *count = reinterpret_cast<FakeComm*>(comm)->nranks;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  log_call("ncclCommCuDevice comm=%p", static_cast<void*>(comm));
  *device = 3;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  log_call("ncclCommUserRank comm=%p", static_cast<void*>(comm));
  *rank = reinterpret_cast<FakeComm*>(comm)->rank;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  log_call("ncclMemAlloc size=%zu", size);
  *ptr = std::malloc(size);
  return *ptr ? ncclSuccess : ncclSystemError;
}

FAKE_API(ncclResult_t, ncclMemFree, void* ptr) {
  log_call("ncclMemFree ptr=%p", ptr);
  std::free(ptr);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
         void** handle) {
  log_call("ncclCommRegister comm=%p buff=%p size=%zu", static_cast<void*>(comm), buff, size);
  *handle = buff;
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  log_call("ncclCommDeregister comm=%p handle=%p", static_cast<void*>(comm), handle);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
         ncclWindow_t* win, int flags) {
  log_call("ncclCommWindowRegister comm=%p buff=%p size=%zu flags=%d", static_cast<void*>(comm),
           buff, size, flags);
  *win = reinterpret_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  log_call("ncclCommWindowDeregister comm=%p win=%p", static_cast<void*>(comm),
           static_cast<void*>(win));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
         ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  log_call("ncclRedOpCreatePreMulSum scalar=%p datatype=%d residence=%d comm=%p", scalar,
           static_cast<int>(datatype), static_cast<int>(residence), static_cast<void*>(comm));
  *op = static_cast<ncclRedOp_t>(g_next_op++);
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  log_call("ncclRedOpDestroy op=%d comm=%p", static_cast<int>(op), static_cast<void*>(comm));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclReduce, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclReduce send=%p recv=%p count=%zu type=%d op=%d root=%d comm=%p stream=%p", s, r,
           count, static_cast<int>(t), static_cast<int>(op), root, static_cast<void*>(comm),
           static_cast<void*>(stream));
  copy(s, r, count, t);
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclBroadcast, const void* s, void* r, size_t count, ncclDataType_t t,
         int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclBroadcast send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  copy(s, r, count, t);
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t t, int root,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclBcast buff=%p count=%zu type=%d root=%d comm=%p stream=%p", buff, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return ncclBroadcast(buff, buff, count, t, root, comm, stream);  // through the PLT, as NCCL does
}

FAKE_API(ncclResult_t, ncclAllReduce, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAllReduce send=%p recv=%p count=%zu type=%d op=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<int>(op), static_cast<void*>(comm),
           static_cast<void*>(stream));
  copy(s, r, count, t);
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclReduceScatter, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclReduceScatter send=%p recv=%p count=%zu type=%d op=%d comm=%p stream=%p", s, r,
           count, static_cast<int>(t), static_cast<int>(op), static_cast<void*>(comm),
           static_cast<void*>(stream));
  copy(s, r, count, t);
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclAllGather, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAllGather send=%p recv=%p count=%zu type=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<void*>(comm), static_cast<void*>(stream));
  copy(s, r, count, t);
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclAlltoAll, const void* s, void* r, size_t count, ncclDataType_t t,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclAlltoAll send=%p recv=%p count=%zu type=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclGather, const void* s, void* r, size_t count, ncclDataType_t t, int root,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclGather send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclScatter, const void* s, void* r, size_t count, ncclDataType_t t,
         int root, ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclScatter send=%p recv=%p count=%zu type=%d root=%d comm=%p stream=%p", s, r, count,
           static_cast<int>(t), root, static_cast<void*>(comm), static_cast<void*>(stream));
  return enqueue_check(comm);
}

FAKE_API(ncclResult_t, ncclSend, const void* s, size_t count, ncclDataType_t t, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  log_call("ncclSend send=%p count=%zu type=%d peer=%d comm=%p stream=%p", s, count,
           static_cast<int>(t), peer, static_cast<void*>(comm), static_cast<void*>(stream));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclRecv, void* r, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
         cudaStream_t stream) {
  log_call("ncclRecv recv=%p count=%zu type=%d peer=%d comm=%p stream=%p", r, count,
           static_cast<int>(t), peer, static_cast<void*>(comm), static_cast<void*>(stream));
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGroupStart, void) {
  log_call("ncclGroupStart");
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGroupEnd, void) {
  log_call("ncclGroupEnd");
  return ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* info) {
  log_call("ncclGroupSimulateEnd info=%p", static_cast<void*>(info));
  return ncclSuccess;
}

FAKE_API(void, ncclResetDebugInit, void) {
  log_call("ncclResetDebugInit");
}

// No twin, as in the real library.
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal() {
  log_call("ncclResetDebugInitInternal");
}

#if SKETCHCCL_NCCL_DEVICE_API
// The device API's host functions: each logs its arguments and answers with values derived from
// them, so that a caller can tell its answer came back unchanged.
FAKE_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
         ncclDevComm_t* out) {
  log_call("ncclDevCommCreate comm=%p reqs=%p out=%p", static_cast<void*>(comm),
           static_cast<const void*>(reqs), static_cast<void*>(out));
  return reqs == nullptr ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm) {
  log_call("ncclDevCommDestroy comm=%p devComm=%p", static_cast<void*>(comm),
           static_cast<const void*>(devComm));
  return ncclSuccess;
}

FAKE_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm) {
  log_call("ncclTeamWorld comm=%p", static_cast<void*>(comm));
  auto* c = reinterpret_cast<FakeComm*>(comm);
  return {c->nranks, c->rank, 1};
}

FAKE_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm) {
  log_call("ncclTeamLsa comm=%p", static_cast<void*>(comm));
  return {1, 0, 2};
}

FAKE_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm) {
  log_call("ncclTeamRail comm=%p", static_cast<void*>(comm));
  auto* c = reinterpret_cast<FakeComm*>(comm);
  return {c->nranks, c->rank, 3};
}

FAKE_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank) {
  log_call("ncclTeamRankToWorld comm=%p team=%d,%d,%d rank=%d", static_cast<void*>(comm),
           team.nRanks, team.rank, team.stride, rank);
  return team.stride * 100 + rank;
}

FAKE_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank) {
  log_call("ncclTeamRankToLsa comm=%p team=%d,%d,%d rank=%d", static_cast<void*>(comm), team.nRanks,
           team.rank, team.stride, rank);
  return team.nRanks * 1000 + rank;
}

FAKE_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers,
         ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclLsaBarrierCreateRequirement team=%d,%d,%d n=%d handle=%p req=%p", team.nRanks,
           team.rank, team.stride, nBarriers, static_cast<void*>(outHandle),
           static_cast<void*>(outReq));
  return nBarriers < 0 ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team,
         int nBarriers, ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclGinBarrierCreateRequirement comm=%p team=%d,%d,%d n=%d handle=%p req=%p",
           static_cast<void*>(comm), team.nRanks, team.rank, team.stride, nBarriers,
           static_cast<void*>(outHandle), static_cast<void*>(outReq));
  return nBarriers < 0 ? ncclInvalidArgument : ncclSuccess;
}

FAKE_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  log_call("ncclLLA2ACalcSlots maxElts=%d maxEltSize=%d", maxElts, maxEltSize);
  return maxElts * maxEltSize + 5;
}

FAKE_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots,
         ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  log_call("ncclLLA2ACreateRequirement blocks=%d slots=%d handle=%p req=%p", nBlocks, nSlots,
           static_cast<void*>(outHandle), static_cast<void*>(outReq));
  return ncclSuccess;
}
#endif
