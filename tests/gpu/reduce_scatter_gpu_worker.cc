// One rank of the GPU ReduceScatter test (tests/gpu/reduce_scatter_gpu_test.cc), through nccl.h
// only, linked against libsketchccl.so in standalone mode. All ranks share device 0.
//
//   reduce_scatter_gpu_worker RANK NRANKS ID_HEX RECVCOUNTS DATA
//
// Each rank checks its own chunk (so a case's HASH is of its name only, as in
// tests/api/reduce_scatter_worker.cc).
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/api/rank_report.h"
#include "tests/gpu/cuda_ok.h"
#include "tests/gpu/rung_report.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::input_value;
using sketchccl::testing::parse_id_hex;

int g_rank = 0, g_nranks = 1;
// HASH of each case: its name (equal on every rank, for expect_agreement), or with "output" as
// the last argument this rank's output bytes (tests/gpu/device_codecs_test.cc compares them
// between two runs).
bool g_hash_output = false;

void report(const std::string& name, const void* out, size_t bytes, const std::string& verdict) {
  if (g_hash_output) {
    sketchccl::testing::report_case(name, out, bytes, verdict);
  } else {
    sketchccl::testing::report_case(name, name.data(), name.size(), verdict);
  }
}

// This rank's chunk against the exact reduction; the error is over the whole result's energy.
std::string verdict_for(const std::string& data, const std::string& codec, const float* out,
                        size_t recvcount, bool avg) {
  const size_t count = recvcount * static_cast<size_t>(g_nranks);
  const size_t first = static_cast<size_t>(g_rank) * recvcount;
  double err = 0, ref = 0;
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int r = 0; r < g_nranks; ++r)
      s += input_value(data, r, i);
    if (avg) s /= g_nranks;
    ref += s * s;
    if (i < first || i >= first + recvcount) continue;
    const float y = out[i - first];
    if (!std::isfinite(y)) return "FAIL non-finite output";
    err += (y - s) * (y - s);
  }
  if (recvcount == 0) return "OK";
  const double nmse = ref > 0 ? (err / recvcount) / (ref / count) : err;
  double bound = sketchccl::testing::codec_nmse_bound(codec);
  if (avg && bound == 0) bound = 1e-12;
  if (nmse > bound) {
    char why[96];
    std::snprintf(why, sizeof why, "FAIL nmse %.3g > bound %.3g", nmse, bound);
    return why;
  }
  return "OK";
}

// In place (NCCL's recvbuff = sendbuff + rank · recvcount) and apart, sum and avg, twice; inputs
// copied in and results out on the stream of the call (stream order only).
void scenario_ring(ncclComm_t comm, const std::string& codec, const std::string& data,
                   size_t recvcount) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t count = recvcount * static_cast<size_t>(g_nranks);
  const size_t bytes = count * sizeof(float), rbytes = recvcount * sizeof(float);
  float *hin = nullptr, *hout = nullptr, *dsend = nullptr, *drecv = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&hin), bytes + 4));
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&hout), rbytes + 4));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dsend), bytes + 4));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&drecv), rbytes + 4));
  for (size_t i = 0; i < count; ++i)
    hin[i] = input_value(data, g_rank, i);
  for (int call = 0; call < 2; ++call) {
    for (int inplace = 0; inplace < 2; ++inplace) {
      for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
        float* out = inplace ? dsend + static_cast<size_t>(g_rank) * recvcount : drecv;
        CUDA_OK(cudaMemcpyAsync(dsend, hin, bytes, cudaMemcpyHostToDevice, s));
        NCCL_OK(ncclReduceScatter(dsend, out, recvcount, ncclFloat32, op, comm, s));
        CUDA_OK(cudaMemcpyAsync(hout, out, rbytes, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        ncclResult_t async = ncclSuccess;
        NCCL_OK(ncclCommGetAsyncError(comm, &async));
        const std::string verdict =
            async != ncclSuccess ? std::string("FAIL async error ") + ncclGetErrorString(async)
                                 : verdict_for(data, codec, hout, recvcount, op == ncclAvg);
        char name[160];
        std::snprintf(name, sizeof name, "rs/%s/%s/n=%zu/%s/%s/call%d", codec.c_str(), data.c_str(),
                      recvcount, op == ncclSum ? "sum" : "avg", inplace ? "inplace" : "outofplace",
                      call);
        report(name, hout, rbytes, verdict);
      }
    }
  }
  cudaFree(dsend);
  cudaFree(drecv);
  cudaFreeHost(hin);
  cudaFreeHost(hout);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: reduce_scatter_gpu_worker RANK NRANKS ID_HEX RECVCOUNTS DATA [output]\n");
    return 2;
  }
  alarm(300);
  g_rank = std::atoi(argv[1]);
  g_nranks = std::atoi(argv[2]);
  g_hash_output = argc > 6 && std::string(argv[6]) == "output";
  ncclUniqueId id;
  if (!parse_id_hex(argv[3], &id)) {
    std::fprintf(stderr, "bad id\n");
    return 2;
  }
  CUDA_OK(cudaSetDevice(0));
  const char* codec_env = std::getenv("SKETCHCCL_CODEC");
  const std::string codec = codec_env ? codec_env : "auto";
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, id, g_rank));
  // RECVCOUNTS: comma-separated, one process start covers several sizes.
  const std::string counts = argv[4];
  for (size_t pos = 0; pos <= counts.size();) {
    size_t end = counts.find(',', pos);
    if (end == std::string::npos) end = counts.size();
    if (end > pos) {
      scenario_ring(comm, codec, argv[5],
                    std::strtoull(counts.substr(pos, end - pos).c_str(), nullptr, 10));
    }
    pos = end + 1;
  }
  sketchccl::testing::report_rung(comm);
  NCCL_OK(ncclCommDestroy(comm));
  return g_case_failures ? 1 : 0;
}
