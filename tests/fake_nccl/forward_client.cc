// A program linked against libnccl.so.2 (the fake one here), run under LD_PRELOAD=libsketchccl.so.
// It calls every function of nccl.h (and of the device API's host functions, when the nccl.h
// built against has them) and checks in the fake's log ($FAKE_NCCL_LOG) that what
// SketchCCL forwards arrives unchanged, and that the AllReduces the policy takes over do not
// arrive and give the sum.
//
//   forward_client RANK NRANKS ID_FILE MODE      MODE: full | norecord | mismatch | onenode | hier
//                                                | hiernb | hiergroup | gather
//
// Rank 0 makes the id and writes it to ID_FILE (norecord: with bytes 40-127 cleared).
// Prints "CHECK <name> OK|FAIL <detail>" lines; exits 1 on any FAIL.
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sketchccl/sketchccl.h>

#include "sketchccl_build_config.h"
#include "tests/fake_nccl/client_util.h"
#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

// NCCL exports it without declaring it in any header.
extern "C" void ncclResetDebugInitInternal();

namespace {

using fake_client::check;
using fake_client::fake_stream;
using fake_client::fmt;
using fake_client::log_since;
using fake_client::log_size;

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

// Threads of this process (/proc/self/task).
int thread_count() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)e;
    ++n;
  }
  return n;
}

// Where the program's calls to `name` go: the object that defines it first (SketchCCL's, under
// LD_PRELOAD, when it exports it; else the fake's).
std::string defined_in(const char* name) {
  Dl_info info{};
  void* fn = dlsym(RTLD_DEFAULT, name);
  return fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname
                                                                              : "(none)";
}

// Every function SketchCCL never takes over: it must reach the fake with the same arguments.
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

// The device API's host functions: each arrives at the real twin with the caller's arguments,
// and its result (a code, a team, a number) comes back as the real one gave it.
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

// The policy table: (op, type, count) -> taken over (sum, no fake call) or forwarded (copy).
void policy_table(ncclComm_t comm, int rank, int nranks, bool expect_any_take_over) {
  struct Row {
    const char* name;
    ncclRedOp_t op;
    ncclDataType_t type;
    size_t count;
    bool take_over;
  };
  const Row rows[] = {
      {"sum-f32-1MiB", ncclSum, ncclFloat32, 262144, true},
      {"avg-f32-4MiB", ncclAvg, ncclFloat32, 1 << 20, true},
      {"sum-bf16-1MiB", ncclSum, ncclBfloat16, 524288, true},
      {"sum-f16-2MiB", ncclSum, ncclFloat16, 1 << 20, true},
      {"sum-f32-small", ncclSum, ncclFloat32, 262143, false},  // 4 bytes under 1 MiB
      {"max-f32", ncclMax, ncclFloat32, 1 << 20, false},
      {"prod-f32", ncclProd, ncclFloat32, 1 << 20, false},
      {"sum-f64", ncclSum, ncclFloat64, 1 << 20, false},
      {"sum-i32", ncclSum, ncclInt32, 1 << 20, false},
  };
  for (const Row& row : rows) {
    const bool take = row.take_over && expect_any_take_over;
    const size_t esz = row.type == ncclFloat64                            ? 8
                       : row.type == ncclFloat32 || row.type == ncclInt32 ? 4
                                                                          : 2;
    std::vector<uint8_t> send(row.count * esz, 0), recv(row.count * esz, 0);
    // Small integers: exact in every float type (bf16 1.0 = 0x3f80, f16 1.0 = 0x3c00).
    for (size_t i = 0; i < row.count; ++i) {
      if (row.type == ncclFloat32)
        reinterpret_cast<float*>(send.data())[i] = static_cast<float>(rank + 1);
      if (row.type == ncclBfloat16) reinterpret_cast<uint16_t*>(send.data())[i] = 0x3f80;
      if (row.type == ncclFloat16) reinterpret_cast<uint16_t*>(send.data())[i] = 0x3c00;
      if (row.type == ncclInt32) reinterpret_cast<int32_t*>(send.data())[i] = rank + 1;
      if (row.type == ncclFloat64) reinterpret_cast<double*>(send.data())[i] = rank + 1;
    }
    size_t at = log_size();
    ncclResult_t r = ncclAllReduce(send.data(), recv.data(), row.count, row.type, row.op, comm,
                                   fake_stream(0x60));
    std::string got = log_since(at);
    const bool arrived = got.find("ncclAllReduce send=") != std::string::npos;
    bool value_ok = true;
    if (take && row.type == ncclFloat32) {
      float want = row.op == ncclAvg ? (nranks + 1) / 2.0f : nranks * (nranks + 1) / 2.0f;
      // q8 by default: within its bound of the exact value.
      float y = reinterpret_cast<float*>(recv.data())[row.count / 2];
      value_ok = std::abs(y - want) <= 0.05f * want;
    } else if (!take) {
      value_ok = recv == send;  // the fake copies
    }
    check(std::string("policy/") + row.name, r == ncclSuccess && arrived == !take && value_ok,
          std::string(take ? "expected taken over" : "expected forwarded") +
              (arrived ? ", arrived" : ", not arrived") + (value_ok ? "" : ", wrong values"));
  }
  // Mixed in one group: one taken over, one forwarded.
  std::vector<float> x(262144, static_cast<float>(rank + 1)), y(262144, 0.0f), z(16, 1.0f),
      w(16, 0.0f);
  size_t at = log_size();
  ncclGroupStart();
  ncclResult_t r1 =
      ncclAllReduce(x.data(), y.data(), x.size(), ncclFloat32, ncclSum, comm, fake_stream(0x61));
  ncclResult_t r2 =
      ncclAllReduce(z.data(), w.data(), z.size(), ncclFloat32, ncclSum, comm, fake_stream(0x62));
  ncclResult_t r3 = ncclGroupEnd();
  std::string got = log_since(at);
  const float want = nranks * (nranks + 1) / 2.0f;
  const bool took = got.find(fmt("count=%zu", x.size())) == std::string::npos;
  check("policy/group-mixed",
        r1 == ncclSuccess && r2 == ncclSuccess && r3 == ncclSuccess &&
            got.find(fmt("ncclAllReduce send=%p recv=%p count=16 type=7 op=0 comm=%p stream=0x62\n",
                         static_cast<void*>(z.data()), static_cast<void*>(w.data()),
                         static_cast<void*>(comm))) != std::string::npos &&
            got.find("ncclGroupStart\n") != std::string::npos &&
            got.find("ncclGroupEnd\n") != std::string::npos &&
            (expect_any_take_over ? took && std::abs(y[100] - want) <= 0.05f * want : !took),
        got);
}

// Polls a nonblocking communicator until it leaves ncclInProgress, as PyTorch does after a call
// that returned it; the last answer.
ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 5000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return async;
}

bool enqueued(ncclResult_t r) {
  return r == ncclSuccess || r == ncclInProgress;
}

// A communicator of 2 nodes x 2 ranks (SKETCHCCL_HOSTID=node<rank / 2>, docs/hierarchy.md): its
// node communicator is split once (color: node, key: local rank): in a blocking init
// (`init_log`), else in the first taken-over AllReduce. Each such AllReduce enqueues
// ncclReduceScatter into this rank's shard of recvbuff, the compressed rail phase, and
// ncclAllGather, both on the node communicator and the caller's stream. The fake's
// ReduceScatter copies the first shard of sendbuff, so each rank's shard holds its own value
// (rank + 1) and the rail sums it over the two nodes; the fake's AllGather copies it to the
// front of recvbuff. `nonblocking`: the parent is (ncclInProgress counts as enqueued, and the
// caller waits for it to be ready after each call). Returns the node communicator, as the fake
// logged it.
std::string hierarchy_phases(ncclComm_t comm, int rank, const std::string& init_log,
                             bool nonblocking) {
  const int L = 2, node = rank / L, local = rank % L;
  const size_t count = 262144, shard = count / L;
  void* cp = static_cast<void*>(comm);
  std::vector<float> x(count, static_cast<float>(rank + 1)), y(count, 0.0f);
  size_t at = log_size();
  ncclResult_t r =
      ncclAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSum, comm, fake_stream(0x70));
  std::string got = log_since(at);
  if (nonblocking) check("hier/parent-ready-after-the-call", wait_ready(comm) == ncclSuccess);
  const std::string split_line =
      fmt("ncclCommSplit comm=%p color=%d key=%d config=0x", cp, node, local);
  const size_t split = nonblocking ? got.find(split_line) : 0;
  check("hier/node-split-at-blocking-init-only",
        nonblocking ? init_log.find(split_line) == std::string::npos
                    : init_log.find(split_line) != std::string::npos &&
                          got.find("ncclCommSplit") == std::string::npos,
        "init log: " + init_log);
  const std::string rs = fmt(
      "ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=", static_cast<void*>(x.data()),
      static_cast<void*>(y.data() + local * shard), shard);
  const size_t rs_at = got.find(rs);
  std::string node_comm;
  if (rs_at != std::string::npos) {
    const size_t c0 = rs_at + rs.size();
    node_comm = got.substr(c0, got.find(' ', c0) - c0);
  }
  const size_t ag_at =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s "
                   "stream=0x70\n",
                   static_cast<void*>(y.data() + local * shard), static_cast<void*>(y.data()),
                   shard, node_comm.c_str()));
  const float want = static_cast<float>(local + 1 + L + local + 1);  // ranks local, L + local
  check("hier/split-reducescatter-allgather-in-order",
        enqueued(r) && split != std::string::npos && rs_at != std::string::npos &&
            got.find(rs + node_comm + " stream=0x70\n") != std::string::npos &&
            ag_at != std::string::npos && (!nonblocking || split < rs_at) && rs_at < ag_at &&
            node_comm != fmt("%p", cp) && got.find("ncclAllReduce send=") == std::string::npos,
        got);
  check("hier/rail-sums-the-shard-over-the-nodes", std::abs(y[0] - want) <= 0.05f * want,
        fmt("y[0] = %g, want %g", y[0], want));
  // In place, avg: no second split; NCCL's in-place forms; the stream is the caller's.
  at = log_size();
  r = ncclAllReduce(x.data(), x.data(), count, ncclFloat32, ncclAvg, comm, fake_stream(0x71));
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  check(
      "hier/in-place-avg-no-second-split",
      enqueued(r) && got.find("ncclCommSplit") == std::string::npos &&
          got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=%s "
                       "stream=0x71\n",
                       static_cast<void*>(x.data()), static_cast<void*>(x.data() + local * shard),
                       shard, static_cast<int>(ncclAvg), node_comm.c_str())) != std::string::npos &&
          got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x71\n",
                       static_cast<void*>(x.data() + local * shard), static_cast<void*>(x.data()),
                       shard, node_comm.c_str())) != std::string::npos,
      got);
  // Inside a group (as XLA issues every collective, and PyTorch's coalesced ones): nothing runs
  // until the group ends, then the same phases, after the real ncclGroupEnd.
  std::vector<float> g(count, static_cast<float>(rank + 1)), h(count, 0.0f);
  at = log_size();
  const ncclResult_t g1 = ncclGroupStart();
  const ncclResult_t g2 =
      ncclAllReduce(g.data(), h.data(), count, ncclFloat32, ncclSum, comm, fake_stream(0x73));
  const std::string in_group = log_since(at);
  const ncclResult_t g3 = ncclGroupEnd();
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  const size_t end_at = got.find("ncclGroupEnd\n");
  const size_t g_rs =
      got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=%s stream=0x73\n",
                   static_cast<void*>(g.data()), static_cast<void*>(h.data() + local * shard),
                   shard, node_comm.c_str()));
  const size_t g_ag =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x73\n",
                   static_cast<void*>(h.data() + local * shard), static_cast<void*>(h.data()),
                   shard, node_comm.c_str()));
  check("hier/grouped-phases-at-the-group-end",
        g1 == ncclSuccess && g2 == ncclSuccess && enqueued(g3) &&
            in_group.find("ncclReduceScatter") == std::string::npos &&
            end_at != std::string::npos && g_rs != std::string::npos && g_ag != std::string::npos &&
            end_at < g_rs && g_rs < g_ag && std::abs(h[0] - want) <= 0.05f * want,
        fmt("h[0] = %g; log: ", h[0]) + got);
  // A count that does not split into L shards: the divisible part through the phases, the tail
  // (one element here) by NCCL's AllReduce on the parent, after them.
  std::vector<float> a(count + 1, static_cast<float>(rank + 1)), b(count + 1, 0.0f);
  at = log_size();
  r = ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat32, ncclSum, comm, fake_stream(0x72));
  got = log_since(at);
  if (nonblocking) (void)wait_ready(comm);
  const size_t odd_rs =
      got.find(fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=0 comm=%s stream=0x72\n",
                   static_cast<void*>(a.data()), static_cast<void*>(b.data() + local * shard),
                   shard, node_comm.c_str()));
  const size_t odd_ag =
      got.find(fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%s stream=0x72\n",
                   static_cast<void*>(b.data() + local * shard), static_cast<void*>(b.data()),
                   shard, node_comm.c_str()));
  const size_t odd_tail =
      got.find(fmt("ncclAllReduce send=%p recv=%p count=1 type=7 op=0 comm=%p stream=0x72\n",
                   static_cast<void*>(a.data() + count), static_cast<void*>(b.data() + count), cp));
  check("hier/odd-count-phases-then-the-tail-by-nccl",
        enqueued(r) && odd_rs != std::string::npos && odd_ag != std::string::npos &&
            odd_tail != std::string::npos && odd_rs < odd_ag && odd_ag < odd_tail &&
            std::abs(b[0] - want) <= 0.05f * want && b[count] == static_cast<float>(rank + 1),
        fmt("b[0] = %g, b[count] = %g; log: ", b[0], b[count]) + got);
  return node_comm;
}

// A ReduceScatter on the 2 x 2 communicator: its input (chunk c for rank c) regrouped by rail into
// a copy S (positions l·N + n: the chunk of the rank at node n, local index l), NCCL's
// ReduceScatter of S in place on the node communicator (N·recvcount elements, into
// S + local·N·recvcount), then the compressed rail ReduceScatter into recvbuff, nothing else.
// The fake's ReduceScatter copies S's first N chunks (chunks 0 and 2: local index 0's rail) into
// this rank's part, so the rail's ReduceScatter leaves rank (n, l) chunk n·L summed over its rail:
// value(l, n·L) + value(L + l, n·L). Apart, in place with avg, and inside a group.
void hierarchy_reduce_scatter(ncclComm_t comm, int rank, const std::string& node_comm,
                              bool nonblocking) {
  const int L = 2, N = 2, P = 4, node = rank / L, local = rank % L;
  const size_t recvcount = 65537, count = recvcount * P;  // odd; the input above 1 MiB
  auto value = [](int r, size_t chunk) { return static_cast<float>(r + 1 + 10 * chunk); };
  const size_t own = static_cast<size_t>(node * L);
  const float sum = value(local, own) + value(L + local, own);
  for (int mode = 0; mode < 3; ++mode) {
    const bool inplace = mode == 1, grouped = mode == 2;
    const ncclRedOp_t op = inplace ? ncclAvg : ncclSum;
    std::vector<float> x(count), y(recvcount, 0.0f);
    for (size_t i = 0; i < count; ++i)
      x[i] = value(rank, i / recvcount);
    float* out = inplace ? x.data() + static_cast<size_t>(rank) * recvcount : y.data();
    cudaStream_t stream = fake_stream(static_cast<uintptr_t>(0x74 + mode));
    size_t at = log_size();
    ncclResult_t g1 = ncclSuccess, g2 = ncclSuccess;
    if (grouped) g1 = ncclGroupStart();
    ncclResult_t r = ncclReduceScatter(x.data(), out, recvcount, ncclFloat32, op, comm, stream);
    const std::string in_group = log_since(at);
    if (grouped) g2 = ncclGroupEnd();
    std::string got = log_since(at);
    if (nonblocking) (void)wait_ready(comm);
    const size_t rs_at = got.find("ncclReduceScatter send=");
    void *s = nullptr, *d = nullptr;
    size_t n = 0;
    int type = -1, got_op = -1;
    char c[64] = {0}, st[64] = {0};
    const bool parsed =
        rs_at != std::string::npos &&
        std::sscanf(got.c_str() + rs_at,
                    "ncclReduceScatter send=%p recv=%p count=%zu type=%d op=%d comm=%63s "
                    "stream=%63s",
                    &s, &d, &n, &type, &got_op, c, st) == 7;
    const auto* sb = static_cast<const uint8_t*>(s);
    const bool call_ok =
        parsed && s != static_cast<void*>(x.data()) &&
        static_cast<const uint8_t*>(d) == sb + static_cast<size_t>(local) * N * recvcount * 4 &&
        n == N * recvcount && type == 7 && got_op == static_cast<int>(op) && node_comm == c &&
        fmt("%p", static_cast<void*>(stream)) == st &&
        got.find("ncclReduceScatter", rs_at + 1) == std::string::npos &&
        got.find("ncclAllGather") == std::string::npos &&
        got.find("ncclAllReduce") == std::string::npos;
    const float want = inplace ? sum / N : sum;
    const bool value_ok = std::abs(out[0] - want) <= 0.05f * want &&
                          std::abs(out[recvcount - 1] - want) <= 0.05f * want;
    const bool group_ok = !grouped || (g1 == ncclSuccess && enqueued(g2) &&
                                       in_group.find("ncclReduceScatter") == std::string::npos &&
                                       got.find("ncclGroupEnd\n") < rs_at);
    check(std::string("hier/reduce-scatter-") + (inplace   ? "in-place-avg"
                                                 : grouped ? "grouped"
                                                           : "apart"),
          enqueued(r) && call_ok && value_ok && group_ok,
          fmt("out[0] = %g, want %g; log: ", out[0], want) + got);
  }
}

// ReduceScatter under AllReduce's policy, on the input's size (nranks · recvcount elements): taken
// over (this rank's chunk of the sum, no fake call) or forwarded unchanged (the fake copies).
void reduce_scatter_policy(ncclComm_t comm, int rank, int nranks, bool expect_any_take_over) {
  struct Row {
    const char* name;
    ncclRedOp_t op;
    ncclDataType_t type;
    size_t recvcount;  // per rank
    bool take_over;
  };
  const size_t mib_f32 = (size_t(1) << 18) / static_cast<size_t>(nranks) + 1;  // input >= 1 MiB
  const Row rows[] = {
      {"sum-f32", ncclSum, ncclFloat32, mib_f32, true},
      {"avg-f32", ncclAvg, ncclFloat32, mib_f32, true},
      {"sum-bf16", ncclSum, ncclBfloat16, 2 * mib_f32, true},
      {"sum-f32-small", ncclSum, ncclFloat32, 1000, false},
      {"max-f32", ncclMax, ncclFloat32, mib_f32, false},
      {"sum-i32", ncclSum, ncclInt32, mib_f32, false},
  };
  for (const Row& row : rows) {
    const bool take = row.take_over && expect_any_take_over;
    const size_t esz = row.type == ncclBfloat16 ? 2 : 4;
    const size_t count = row.recvcount * static_cast<size_t>(nranks);
    std::vector<uint8_t> send(count * esz, 0), recv(row.recvcount * esz, 0);
    for (size_t i = 0; i < count; ++i) {
      if (row.type == ncclFloat32)
        reinterpret_cast<float*>(send.data())[i] = static_cast<float>(rank + 1);
      if (row.type == ncclBfloat16) reinterpret_cast<uint16_t*>(send.data())[i] = 0x3f80;
      if (row.type == ncclInt32) reinterpret_cast<int32_t*>(send.data())[i] = rank + 1;
    }
    size_t at = log_size();
    ncclResult_t r = ncclReduceScatter(send.data(), recv.data(), row.recvcount, row.type, row.op,
                                       comm, fake_stream(0x63));
    std::string got = log_since(at);
    const bool arrived =
        got.find(
            fmt("ncclReduceScatter send=%p recv=%p count=%zu type=%d op=%d comm=%p stream=0x63\n",
                static_cast<void*>(send.data()), static_cast<void*>(recv.data()), row.recvcount,
                static_cast<int>(row.type), static_cast<int>(row.op), static_cast<void*>(comm))) !=
        std::string::npos;
    bool value_ok = true;
    if (take && row.type == ncclFloat32) {
      const float want = row.op == ncclAvg ? (nranks + 1) / 2.0f : nranks * (nranks + 1) / 2.0f;
      const float* y = reinterpret_cast<const float*>(recv.data());
      value_ok = std::abs(y[0] - want) <= 0.05f * want &&
                 std::abs(y[row.recvcount - 1] - want) <= 0.05f * want;
    } else if (!take) {
      value_ok = std::equal(recv.begin(), recv.end(), send.begin());  // the fake copies
    }
    check(std::string("reduce-scatter-policy/") + row.name,
          r == ncclSuccess && arrived == !take && value_ok,
          std::string(take ? "expected taken over" : "expected forwarded") +
              (arrived ? ", arrived" : ", not arrived") + (value_ok ? "" : ", wrong values"));
  }
}

// ncclAllGather of host buffers, mode gather (SKETCHCCL_ALLGATHER_CODEC from the test, or unset):
// unset, a float32 AllGather over SKETCHCCL_MIN_BYTES arrives at the fake unchanged; set, it is
// taken over (never arrives), close to the exact gather, counted in the statistics, and every
// rank prints a hash of its output (the test compares them: the same bits on every rank), and so
// is a bfloat16 one; an int32 AllGather arrives either way.
void gather_front(ncclComm_t comm, int rank, int nranks) {
  const bool set = std::getenv("SKETCHCCL_ALLGATHER_CODEC") != nullptr;
  void* cp = static_cast<void*>(comm);
  constexpr size_t R = 70001;  // nranks · R floats: over 1 MiB on 4 ranks
  auto value = [](int r, size_t i) {
    return std::cos(0.002f * static_cast<float>(i)) * static_cast<float>(r + 1);
  };
  std::vector<float> x(R), y(R * static_cast<size_t>(nranks), -1.f);
  for (size_t i = 0; i < R; ++i)
    x[i] = value(rank, i);
  using GetStats = int (*)(ncclComm_t, sketchcclCommStats*);
  auto get = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "sketchcclCommGetStats"));
  sketchcclCommStats st;
  std::memset(&st, 0, sizeof st);
  st.size = sizeof st;
  size_t at = log_size();
  ncclResult_t r = ncclAllGather(x.data(), y.data(), R, ncclFloat32, comm, fake_stream(0x58));
  std::string got = log_since(at);
  const int rc = get != nullptr ? get(comm, &st) : -1;
  const std::string line = fmt("ncclAllGather send=%p recv=%p count=%zu type=7 comm=%p stream=0x58",
                               static_cast<void*>(x.data()), static_cast<void*>(y.data()), R, cp);
  if (!set) {
    check("gather/unset-forwarded",
          r == ncclSuccess && got.find(line + "\n") != std::string::npos && rc == 0 &&
              st.allgather_calls == 0,
          got);
  } else {
    double err = 0, ref = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int q = 0; q < nranks; ++q) {
      for (size_t i = 0; i < R; ++i) {
        const float v = y[static_cast<size_t>(q) * R + i], want = value(q, i);
        err += (v - want) * (v - want);
        ref += want * want;
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        hash = (hash ^ bits) * 1099511628211ull;
      }
    }
    check("gather/set-taken-over",
          r == ncclSuccess && got.find("ncclAllGather") == std::string::npos && err / ref < 1e-3 &&
              err > 0 && rc == 0 && st.allgather_calls == 1 && st.allgather_failed == 0 &&
              st.allgather_bytes_in == R * 4 && st.allgather_inter_node_bytes_sent > 0,
          fmt("r=%d nmse=%g calls=%llu; log: ", r, err / ref,
              static_cast<unsigned long long>(st.allgather_calls)) +
              got);
    std::printf("GATHERHASH f32 %016llx\n", static_cast<unsigned long long>(hash));
  }
  if (set) {
    // bfloat16 (over SKETCHCCL_MIN_BYTES gathered): taken over too, close, the same bits.
    constexpr size_t B = 2 * R;
    auto to_bf16 = [](float f) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return static_cast<uint16_t>(u >> 16);
    };
    auto from_bf16 = [](uint16_t h) {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    };
    std::vector<uint16_t> xb(B), yb(B * static_cast<size_t>(nranks), 0);
    for (size_t i = 0; i < B; ++i)
      xb[i] = to_bf16(value(rank, i));
    at = log_size();
    r = ncclAllGather(xb.data(), yb.data(), B, ncclBfloat16, comm, fake_stream(0x5a));
    got = log_since(at);
    double err = 0, ref = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int q = 0; q < nranks; ++q) {
      for (size_t i = 0; i < B; ++i) {
        const uint16_t h = yb[static_cast<size_t>(q) * B + i];
        const float v = from_bf16(h), want = from_bf16(to_bf16(value(q, i)));
        err += (v - want) * (v - want);
        ref += want * want;
        hash = (hash ^ h) * 1099511628211ull;
      }
    }
    std::memset(&st, 0, sizeof st);
    st.size = sizeof st;
    const int rc2 = get != nullptr ? get(comm, &st) : -1;
    check("gather/bf16-taken-over",
          r == ncclSuccess && got.find("ncclAllGather") == std::string::npos && err / ref < 1e-3 &&
              rc2 == 0 && st.allgather_calls == 2 && st.allgather_failed == 0,
          fmt("r=%d nmse=%g calls=%llu; log: ", r, err / ref,
              static_cast<unsigned long long>(st.allgather_calls)) +
              got);
    std::printf("GATHERHASH bf16 %016llx\n", static_cast<unsigned long long>(hash));
  }
  std::vector<int32_t> xi(99, rank), yi(99 * static_cast<size_t>(nranks), -1);
  at = log_size();
  r = ncclAllGather(xi.data(), yi.data(), 99, ncclInt32, comm, fake_stream(0x59));
  got = log_since(at);
  check("gather/int32-forwarded",
        r == ncclSuccess &&
            got.find(fmt("ncclAllGather send=%p recv=%p count=99 type=2 comm=%p stream=0x59\n",
                         static_cast<void*>(xi.data()), static_cast<void*>(yi.data()), cp)) !=
                std::string::npos,
        got);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: forward_client RANK NRANKS ID_FILE "
                 "full|norecord|mismatch|onenode|hier|fastlink|gather\n");
    return 2;
  }
  alarm(120);
  const int rank = std::atoi(argv[1]), nranks = std::atoi(argv[2]);
  const std::string mode = argv[4];
  const char* log = std::getenv("FAKE_NCCL_LOG");
  if (log == nullptr) return 2;
  fake_client::g_log = log;
  ncclUniqueId id;
  fake_client::exchange_id(rank, argv[3], mode == "norecord", &id);
  ncclComm_t comm = nullptr;
  size_t at = log_size();
  const bool nonblocking = mode == "hiernb";
  ncclResult_t r = ncclSuccess;
  if (nonblocking) {
    // Nonblocking (config blocking=0, or NCCL_COMM_BLOCKING=0 from the test): polled until
    // ready, as PyTorch's waitReady does.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
    check("forward/CommInitRankConfig-nonblocking",
          r == ncclInProgress && comm != nullptr && wait_ready(comm) == ncclSuccess,
          "result " + std::to_string(r));
  } else if (mode == "hiergroup") {
    // As nccl-tests makes every communicator: inside a group, which NCCL runs at its end.
    const ncclResult_t g1 = ncclGroupStart();
    r = ncclCommInitRank(&comm, nranks, id, rank);
    const std::string in_group = log_since(at);
    const ncclResult_t g2 = ncclGroupEnd();
    const std::string got = log_since(at);
    const size_t end_at = got.find("ncclGroupEnd\n");
    const size_t split_at = got.find(fmt("ncclCommSplit comm=%p", static_cast<void*>(comm)));
    check("forward/CommInitRank-in-a-group-split-after-its-end",
          g1 == ncclSuccess && r == ncclSuccess && g2 == ncclSuccess &&
              in_group.find("ncclCommSplit") == std::string::npos && end_at != std::string::npos &&
              split_at != std::string::npos && end_at < split_at,
          got);
  } else {
    r = ncclCommInitRank(&comm, nranks, id, rank);
    check("forward/CommInitRank",
          r == ncclSuccess && log_since(at).find(fmt(
                                  "ncclCommInitRank nranks=%d rank=%d id0=%02x\n", nranks, rank,
                                  static_cast<unsigned char>(id.internal[0]))) != std::string::npos,
          log_since(at));
  }
  const std::string init_log = log_since(at);
  // Internal calls through the PLT reached the shim and went on to the fake (init path).
  check("plt/CommGetAsyncError-from-init",
        log_since(at).find(fmt("ncclCommGetAsyncError comm=%p", static_cast<void*>(comm))) !=
            std::string::npos);
  std::string node_comm;
  if (mode == "hier" || mode == "hiernb" || mode == "hiergroup") {
    node_comm = hierarchy_phases(comm, rank, init_log, nonblocking);
    hierarchy_reduce_scatter(comm, rank, node_comm, nonblocking);
  } else if (mode == "gather") {
    gather_front(comm, rank, nranks);
  } else {
    policy_table(comm, rank, nranks, mode == "full");
    reduce_scatter_policy(comm, rank, nranks, mode == "full");
  }
  if (mode == "fastlink") {
    // auto on a link faster than the host's codecs: every call the policy would take over went
    // to NCCL (checked above), each counted as auto's verdict.
    using GetStats = int (*)(ncclComm_t, sketchcclCommStats*);
    auto get = reinterpret_cast<GetStats>(dlsym(RTLD_DEFAULT, "sketchcclCommGetStats"));
    sketchcclCommStats st;
    std::memset(&st, 0, sizeof st);
    st.size = sizeof st;
    const int rc = get != nullptr ? get(comm, &st) : -1;
    check(
        "fastlink/forwarded-as-auto's-verdict",
        rc == 0 && st.calls_forwarded_no_gain == 8 && st.calls_taken == 0 && st.link_gbps == 100000,
        fmt("rc %d, no-gain %llu, taken %llu, link %g Gbit/s", rc,
            static_cast<unsigned long long>(st.calls_forwarded_no_gain),
            static_cast<unsigned long long>(st.calls_taken), st.link_gbps));
  }
  if (mode == "hier") {
    // A blocking split's child (PyTorch's new_group): its node communicator comes with it.
    ncclComm_t child = nullptr;
    at = log_size();
    r = ncclCommSplit(comm, 0, rank, &child, nullptr);
    const std::string got = log_since(at);
    check("hier/split-child-gets-its-node-communicator-in-the-split",
          r == ncclSuccess && child != nullptr &&
              got.find(fmt("ncclCommSplit comm=%p color=%d key=%d config=0x",
                           static_cast<void*>(child), rank / 2, rank % 2)) != std::string::npos,
          got);
    ncclCommDestroy(child);
  }
  if (mode == "full") {
    every_forwarded_function(comm, rank);
#if SKETCHCCL_NCCL_DEVICE_API
    every_device_api_function(comm, rank, nranks);
#endif
  }
  at = log_size();
  r = ncclCommDestroy(comm);
  check("forward/CommDestroy",
        r == ncclSuccess && log_since(at).find(fmt("ncclCommDestroy comm=%p\n",
                                                   static_cast<void*>(comm))) != std::string::npos);
  if (mode == "hier" || mode == "hiernb" || mode == "hiergroup") {
    check("hier/node-communicator-destroyed-with-its-parent",
          log_since(at).find("ncclCommDestroy comm=" + node_comm + "\n") != std::string::npos,
          log_since(at));
  }
  if (rank == 0 && mode == "full") {
    // ncclCommInitAll calls ncclGetUniqueId through the PLT: the shim sees it and forwards it.
    // Its communicators (GPUs of one process) get no SketchCCL state: no thread is started.
    ncclComm_t comms[2] = {nullptr, nullptr};
    at = log_size();
    const int threads_before = thread_count();
    r = ncclCommInitAll(comms, 2, nullptr);
    const int threads_after = thread_count();
    std::string got = log_since(at);
    check("forward/CommInitAll+GetUniqueId-through-PLT",
          r == ncclSuccess &&
              got.find("ncclCommInitAll ndev=2 devlist=(nil)\n") != std::string::npos &&
              got.find("ncclGetUniqueId\n") != std::string::npos,
          got);
    check("CommInitAll/costs-no-thread", threads_after == threads_before,
          fmt("%d threads before, %d after", threads_before, threads_after));
    for (ncclComm_t c : comms)
      ncclCommDestroy(c);
  }
  return fake_client::g_fails ? 1 : 0;
}
