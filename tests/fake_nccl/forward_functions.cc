#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <sketchccl/sketchccl.h>

#include "tests/fake_nccl/client_util.h"
#include "tests/fake_nccl/forward_cases.h"
#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

// NCCL exports it without declaring it in any header.
extern "C" void ncclResetDebugInitInternal();

namespace forward_client {
namespace {

// Calls fn and checks that the fake logged exactly `line` (among what it logged meanwhile).
template <typename Fn>
void expect_forwarded(const std::string& name, const std::string& line, Fn fn,
                      ncclResult_t want = ncclSuccess) {
  size_t at = log_size();
  ncclResult_t r = fn();
  std::string got = log_since(at);
  check("forward/" + name, r == want && got.find(line + "\n") != std::string::npos,
        "result " + std::to_string(r) + ", log: " + got);
}

// Where the program's calls to `name` go: the object that defines it first (SketchCCL's, under
// LD_PRELOAD, when it exports it; else the fake's).
std::string defined_in(const char* name) {
  Dl_info info{};
  void* fn = dlsym(RTLD_DEFAULT, name);
  return fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname
                                                                              : "(none)";
}

}  // namespace

void every_forwarded_function(ncclComm_t comm, int rank) {
  void* cp = static_cast<void*>(comm);
  int v = 0;
  expect_forwarded("GetVersion", "ncclGetVersion", [&] { return ncclGetVersion(&v); });
  check("GetVersion/value", v == NCCL_VERSION_CODE);
  int n = 0;
  expect_forwarded("CommCount", fmt("ncclCommCount comm=%p", cp),
                   [&] { return ncclCommCount(comm, &n); });
  expect_forwarded("CommUserRank", fmt("ncclCommUserRank comm=%p", cp),
                   [&] { return ncclCommUserRank(comm, &n); });
  check("CommUserRank/value", n == rank);
  expect_forwarded("CommCuDevice", fmt("ncclCommCuDevice comm=%p", cp),
                   [&] { return ncclCommCuDevice(comm, &n); });
  check("CommCuDevice/value", n == 3, "the fake's device is 3");
  ncclResult_t async = ncclInternalError;
  expect_forwarded("CommGetAsyncError", fmt("ncclCommGetAsyncError comm=%p", cp),
                   [&] { return ncclCommGetAsyncError(comm, &async); });
  check("CommGetAsyncError/value", async == ncclSuccess);

  size_t at = log_size();
  const char* es = ncclGetErrorString(ncclInvalidUsage);
  check("forward/GetErrorString",
        std::string(es) == "fake error string 5" &&
            log_since(at).find("ncclGetErrorString result=5\n") != std::string::npos);
  const char* le = ncclGetLastError(comm);
  check("forward/GetLastError", std::string(le) == "fake last error");

  void* mem = nullptr;
  expect_forwarded("MemAlloc", "ncclMemAlloc size=12345",
                   [&] { return ncclMemAlloc(&mem, 12345); });
  expect_forwarded("MemFree", fmt("ncclMemFree ptr=%p", mem), [&] { return ncclMemFree(mem); });
  char buf[4096];
  void* handle = nullptr;
  expect_forwarded("CommRegister",
                   fmt("ncclCommRegister comm=%p buff=%p size=4096", cp, static_cast<void*>(buf)),
                   [&] { return ncclCommRegister(comm, buf, sizeof buf, &handle); });
  expect_forwarded("CommDeregister", fmt("ncclCommDeregister comm=%p handle=%p", cp, handle),
                   [&] { return ncclCommDeregister(comm, handle); });
  ncclWindow_t win = nullptr;
  expect_forwarded(
      "CommWindowRegister",
      fmt("ncclCommWindowRegister comm=%p buff=%p size=4096 flags=1", cp, static_cast<void*>(buf)),
      [&] { return ncclCommWindowRegister(comm, buf, sizeof buf, &win, 1); });
  expect_forwarded("CommWindowDeregister",
                   fmt("ncclCommWindowDeregister comm=%p win=%p", cp, static_cast<void*>(win)),
                   [&] { return ncclCommWindowDeregister(comm, win); });
  float scalar = 0.5f;
  ncclRedOp_t premul = ncclSum;
  expect_forwarded("RedOpCreatePreMulSum",
                   fmt("ncclRedOpCreatePreMulSum scalar=%p datatype=7 residence=1 comm=%p",
                       static_cast<void*>(&scalar), cp),
                   [&] {
                     return ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32,
                                                     ncclScalarHostImmediate, comm);
                   });
  check("RedOpCreatePreMulSum/op", premul >= ncclNumOps);

  std::vector<float> a(1 << 20, 1.0f), b(1 << 20, 0.0f);
  void* ap = a.data();
  void* bp = b.data();
  const size_t big = a.size();
  // A PreMulSum op is always NCCL's, however large the buffer.
  expect_forwarded(
      "AllReduce/premulsum",
      fmt("ncclAllReduce send=%p recv=%p count=%zu type=7 op=%d comm=%p stream=0x51", ap, bp, big,
          static_cast<int>(premul), cp),
      [&] { return ncclAllReduce(ap, bp, big, ncclFloat32, premul, comm, fake_stream(0x51)); });
  expect_forwarded("RedOpDestroy",
                   fmt("ncclRedOpDestroy op=%d comm=%p", static_cast<int>(premul), cp),
                   [&] { return ncclRedOpDestroy(premul, comm); });
  expect_forwarded(
      "Reduce",
      fmt("ncclReduce send=%p recv=%p count=77 type=7 op=0 root=1 comm=%p stream=0x52", ap, bp, cp),
      [&] { return ncclReduce(ap, bp, 77, ncclFloat32, ncclSum, 1, comm, fake_stream(0x52)); });
  at = log_size();
  ncclResult_t r = ncclBcast(ap, 33, ncclFloat16, 0, comm, fake_stream(0x53));
  std::string got = log_since(at);
  check(
      "forward/Bcast+Broadcast-through-PLT",
      r == ncclSuccess &&
          got.find(fmt("ncclBcast buff=%p count=33 type=6 root=0 comm=%p stream=0x53\n", ap, cp)) !=
              std::string::npos &&
          got.find(fmt("ncclBroadcast send=%p recv=%p count=33 type=6 root=0 comm=%p stream=0x53\n",
                       ap, ap, cp)) != std::string::npos,
      got);
  expect_forwarded(
      "Broadcast",
      fmt("ncclBroadcast send=%p recv=%p count=44 type=9 root=1 comm=%p stream=0x54", ap, bp, cp),
      [&] { return ncclBroadcast(ap, bp, 44, ncclBfloat16, 1, comm, fake_stream(0x54)); });
  // A float sum of 1 MiB and more is taken over (reduce_scatter_policy); a max is NCCL's.
  expect_forwarded(
      "ReduceScatter",
      fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=2 comm=%p stream=0x55", ap, bp,
          big, cp),
      [&] {
        return ncclReduceScatter(ap, bp, big, ncclFloat32, ncclMax, comm, fake_stream(0x55));
      });
  expect_forwarded(
      "AllGather",
      fmt("ncclAllGather send=%p recv=%p count=99 type=2 comm=%p stream=0x56", ap, bp, cp),
      [&] { return ncclAllGather(ap, bp, 99, ncclInt32, comm, fake_stream(0x56)); });
  expect_forwarded(
      "AlltoAll",
      fmt("ncclAlltoAll send=%p recv=%p count=5 type=8 comm=%p stream=0x57", ap, bp, cp),
      [&] { return ncclAlltoAll(ap, bp, 5, ncclFloat64, comm, fake_stream(0x57)); });
  expect_forwarded(
      "Gather",
      fmt("ncclGather send=%p recv=%p count=6 type=0 root=1 comm=%p stream=0x58", ap, bp, cp),
      [&] { return ncclGather(ap, bp, 6, ncclInt8, 1, comm, fake_stream(0x58)); });
  expect_forwarded(
      "Scatter",
      fmt("ncclScatter send=%p recv=%p count=7 type=1 root=0 comm=%p stream=0x59", ap, bp, cp),
      [&] { return ncclScatter(ap, bp, 7, ncclUint8, 0, comm, fake_stream(0x59)); });
  expect_forwarded("Send",
                   fmt("ncclSend send=%p count=8 type=7 peer=1 comm=%p stream=0x5a", ap, cp),
                   [&] { return ncclSend(ap, 8, ncclFloat32, 1, comm, fake_stream(0x5a)); });
  expect_forwarded("Recv",
                   fmt("ncclRecv recv=%p count=9 type=7 peer=0 comm=%p stream=0x5b", bp, cp),
                   [&] { return ncclRecv(bp, 9, ncclFloat32, 0, comm, fake_stream(0x5b)); });
  expect_forwarded("GroupStart", "ncclGroupStart", [&] { return ncclGroupStart(); });
  expect_forwarded("GroupEnd", "ncclGroupEnd", [&] { return ncclGroupEnd(); });
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  expect_forwarded("GroupSimulateEnd",
                   fmt("ncclGroupSimulateEnd info=%p", static_cast<void*>(&sim)),
                   [&] { return ncclGroupSimulateEnd(&sim); });
  expect_forwarded("CommRevoke", fmt("ncclCommRevoke comm=%p flags=0", cp),
                   [&] { return ncclCommRevoke(comm, 0); });
  // The deprecated one reaches the real twin; ncclResetDebugInitInternal has none.
  for (const char* name : {"ncclResetDebugInit", "ncclResetDebugInitInternal"}) {
    check(std::string("exported/") + name, defined_in(name) == defined_in("sketchcclGetVersion"),
          defined_in(name));
  }
  at = log_size();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  check("forward/ResetDebugInit", log_since(at).find("ncclResetDebugInit\n") != std::string::npos,
        log_since(at));
  at = log_size();
  ncclResetDebugInitInternal();
  check("forward/ResetDebugInitInternal",
        log_since(at).find("ncclResetDebugInitInternal\n") != std::string::npos, log_since(at));
}

#if SKETCHCCL_NCCL_DEVICE_API
bool same_team(ncclTeam_t t, int n, int r, int s) {
  return t.nRanks == n && t.rank == r && t.stride == s;
}

void every_device_api_function(ncclComm_t comm, int rank, int nranks) {
  // SketchCCL exports each, so that it is in the path (else the fake would answer directly).
  const std::string shim = defined_in("sketchcclGetVersion");
  for (const char* name :
       {"ncclDevCommCreate", "ncclDevCommDestroy", "ncclTeamWorld", "ncclTeamLsa", "ncclTeamRail",
        "ncclTeamRankToWorld", "ncclTeamRankToLsa", "ncclLsaBarrierCreateRequirement",
        "ncclGinBarrierCreateRequirement", "ncclLLA2ACalcSlots", "ncclLLA2ACreateRequirement"}) {
    check(std::string("exported/") + name, defined_in(name) == shim,
          defined_in(name) + ", not " + shim);
  }
  void* cp = static_cast<void*>(comm);
  ncclDevCommRequirements_t reqs{};
  alignas(64) unsigned char devcomm[512] = {};
  auto* dc = reinterpret_cast<ncclDevComm_t*>(devcomm);
  void* dp = static_cast<void*>(dc);
  expect_forwarded(
      "DevCommCreate",
      fmt("ncclDevCommCreate comm=%p reqs=%p out=%p", cp, static_cast<void*>(&reqs), dp),
      [&] { return ncclDevCommCreate(comm, &reqs, dc); });
  expect_forwarded(
      "DevCommCreate/error-unchanged", fmt("ncclDevCommCreate comm=%p reqs=(nil) out=%p", cp, dp),
      [&] { return ncclDevCommCreate(comm, nullptr, dc); }, ncclInvalidArgument);
  expect_forwarded("DevCommDestroy", fmt("ncclDevCommDestroy comm=%p devComm=%p", cp, dp),
                   [&] { return ncclDevCommDestroy(comm, dc); });
  size_t at = log_size();
  ncclTeam_t world = ncclTeamWorld(comm);
  check("forward/TeamWorld",
        same_team(world, nranks, rank, 1) &&
            log_since(at).find(fmt("ncclTeamWorld comm=%p\n", cp)) != std::string::npos,
        log_since(at));
  at = log_size();
  ncclTeam_t lsa = ncclTeamLsa(comm);
  check("forward/TeamLsa",
        same_team(lsa, 1, 0, 2) &&
            log_since(at).find(fmt("ncclTeamLsa comm=%p\n", cp)) != std::string::npos,
        log_since(at));
  at = log_size();
  ncclTeam_t rail = ncclTeamRail(comm);
  check("forward/TeamRail",
        same_team(rail, nranks, rank, 3) &&
            log_since(at).find(fmt("ncclTeamRail comm=%p\n", cp)) != std::string::npos,
        log_since(at));
  const ncclTeam_t team = {4, 1, 5};
  at = log_size();
  int v = ncclTeamRankToWorld(comm, team, 2);
  check("forward/TeamRankToWorld",
        v == 502 && log_since(at).find(fmt("ncclTeamRankToWorld comm=%p team=4,1,5 rank=2\n",
                                           cp)) != std::string::npos,
        fmt("%d; ", v) + log_since(at));
  at = log_size();
  v = ncclTeamRankToLsa(comm, team, 3);
  check("forward/TeamRankToLsa",
        v == 4003 && log_since(at).find(fmt("ncclTeamRankToLsa comm=%p team=4,1,5 rank=3\n", cp)) !=
                         std::string::npos,
        fmt("%d; ", v) + log_since(at));
  alignas(64) unsigned char handle[256] = {};
  ncclDevResourceRequirements_t req{};
  void* hp = static_cast<void*>(handle);
  void* rp = static_cast<void*>(&req);
  expect_forwarded("LsaBarrierCreateRequirement",
                   fmt("ncclLsaBarrierCreateRequirement team=4,1,5 n=3 handle=%p req=%p", hp, rp),
                   [&] {
                     return ncclLsaBarrierCreateRequirement(
                         team, 3, reinterpret_cast<ncclLsaBarrierHandle_t*>(handle), &req);
                   });
  expect_forwarded(
      "LsaBarrierCreateRequirement/error-unchanged",
      fmt("ncclLsaBarrierCreateRequirement team=4,1,5 n=-1 handle=%p req=%p", hp, rp),
      [&] {
        return ncclLsaBarrierCreateRequirement(
            team, -1, reinterpret_cast<ncclLsaBarrierHandle_t*>(handle), &req);
      },
      ncclInvalidArgument);
  expect_forwarded(
      "GinBarrierCreateRequirement",
      fmt("ncclGinBarrierCreateRequirement comm=%p team=4,1,5 n=2 handle=%p req=%p", cp, hp, rp),
      [&] {
        return ncclGinBarrierCreateRequirement(
            comm, team, 2, reinterpret_cast<ncclGinBarrierHandle_t*>(handle), &req);
      });
  at = log_size();
  v = ncclLLA2ACalcSlots(6, 8);
  check("forward/LLA2ACalcSlots",
        v == 53 &&
            log_since(at).find("ncclLLA2ACalcSlots maxElts=6 maxEltSize=8\n") != std::string::npos,
        fmt("%d; ", v) + log_since(at));
  expect_forwarded("LLA2ACreateRequirement",
                   fmt("ncclLLA2ACreateRequirement blocks=2 slots=16 handle=%p req=%p", hp, rp),
                   [&] {
                     return ncclLLA2ACreateRequirement(
                         2, 16, reinterpret_cast<ncclLLA2AHandle_t*>(handle), &req);
                   });
}
#endif

}  // namespace forward_client
