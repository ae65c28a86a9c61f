// The scenarios the AllReduce and ReduceScatter workers (nccl_worker.cc, reduce_scatter_worker.cc)
// share, written once over a row of the reductions' table: a collective is its call, the shape of
// its buffers and the prefix of its case names.
#pragma once

#include <nccl.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/rank_report.h"

namespace sketchccl::testing {

struct Reduction {
  const char* case_prefix;  // of its case names
  bool scatters;            // the input is NRANKS times the output (count: the output's)
  ncclResult_t (*call)(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                       ncclComm_t comm, cudaStream_t stream);
};

inline const Reduction kAllReduce{"", false, ncclAllReduce};
inline const Reduction kReduceScatter{"rs-", true, ncclReduceScatter};

// A float32 sum's buffers of `count` output elements (and `slack` more), all 1: the AllReduce in
// place, the ReduceScatter apart, so that both placements meet a failing call.
struct SumBuffers {
  SumBuffers(const Reduction& red, size_t count, int nranks, size_t slack)
      : send(count * (red.scatters ? static_cast<size_t>(nranks) : 1) + slack, 1.0f),
        recv(red.scatters ? count + slack : 0, 1.0f),
        out(red.scatters ? recv.data() : send.data()) {}
  std::vector<float> send, recv;
  float* out;
};

// Ranks pass different counts: every rank gets an error, nobody hangs or overruns.
inline int scenario_count_mismatch(const Reduction& red, ncclComm_t comm, int rank, int nranks) {
  const size_t count = 4096 + static_cast<size_t>(rank) * 64;
  SumBuffers b(red, count, nranks, 1024);
  const ncclResult_t r = red.call(b.send.data(), b.out, count, ncclFloat32, ncclSum, comm, nullptr);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  report_case(std::string(red.case_prefix) + "count-mismatch-fails", nullptr, 0,
              r != ncclSuccess && async != ncclSuccess ? "OK" : "FAIL no error");
  std::printf("INFO rank %d: %s / %s: %s\n", rank, ncclGetErrorString(r), ncclGetErrorString(async),
              ncclGetLastError(comm));
  return 0;
}

// The last rank dies in the middle of a large call; the others must return an error in time, and
// abort promptly. Returns 1: the communicator is gone.
inline int scenario_kill(const Reduction& red, ncclComm_t comm, size_t count, int rank,
                         int nranks) {
  SumBuffers b(red, count, nranks, 0);
  if (rank == nranks - 1) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      raise(SIGKILL);
    }).detach();
  }
  const auto t0 = std::chrono::steady_clock::now();
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 1000 && r == ncclSuccess; ++i)
    r = red.call(b.send.data(), b.out, count, ncclFloat32, ncclSum, comm, nullptr);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("INFO rank %d: error after %.2f s: %s\n", rank, secs, ncclGetLastError(comm));
  const std::string prefix = red.case_prefix;
  report_case(prefix + "peer-killed-gives-error", nullptr, 0,
              r != ncclSuccess ? "OK" : "FAIL no error");
  const auto a0 = std::chrono::steady_clock::now();
  ncclCommAbort(comm);
  const double abort_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
  report_case(prefix + "abort-is-prompt", nullptr, 0,
              abort_secs < 2.0 ? "OK" : "FAIL abort took long");
  return 1;
}

}  // namespace sketchccl::testing
