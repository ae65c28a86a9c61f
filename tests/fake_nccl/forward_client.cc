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
// Prints "CHECK <name> OK|FAIL <detail>" lines; exits 1 on any FAIL. This file: the modes, the
// policy tables and main; the other cases: forward_cases.h.
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
#include "tests/fake_nccl/forward_cases.h"

namespace forward_client {
namespace {

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

}  // namespace

// The program (main, below, only calls it: the cases live in this namespace).
int run(int argc, char** argv) {
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

}  // namespace forward_client

int main(int argc, char** argv) {
  return forward_client::run(argc, argv);
}
