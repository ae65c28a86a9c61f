// One rank of the GPU multi-process tests (tests/gpu/api_test.cc), through nccl.h only, linked
// against libsketchccl.so in standalone mode. All ranks share device 0.
//
//   gpu_worker SCENARIO RANK NRANKS ID_HEX [ARGS...]
//
// Prints "CASE <name> HASH <fnv1a of the output> <OK|FAIL why>" per check, like
// tests/api/nccl_worker.cc; the driver wants OK everywhere and equal hashes across ranks.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/rank_report.h"
#include "tests/gpu/cuda_ok.h"
#include "tests/gpu/rung_report.h"
#include "tests/gpu/test_kernels.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::input_value;
using sketchccl::testing::report_case;

int g_rank = 0, g_nranks = 1;

double nmse_bound(const std::string& codec) {
  return sketchccl::testing::codec_nmse_bound(codec);
}

std::string verdict_for(const std::string& data, const std::string& codec, const float* out,
                        size_t count, bool avg) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int r = 0; r < g_nranks; ++r)
      s += input_value(data, r, i);
    if (avg) s /= g_nranks;
    if (!std::isfinite(out[i])) return "FAIL non-finite output";
    err += (out[i] - s) * (out[i] - s);
    ref += s * s;
  }
  const double nmse = ref > 0 ? err / ref : err;
  double bound = nmse_bound(codec);
  if (avg && bound == 0) bound = 1e-12;
  if (nmse > bound) {
    char why[96];
    std::snprintf(why, sizeof why, "FAIL nmse %.3g > bound %.3g", nmse, bound);
    return why;
  }
  return "OK";
}

// The ring on device buffers: in-place and out-of-place, sum and avg, `calls` times; inputs are
// copied in and results out on the same stream as the AllReduce (stream order only).
int scenario_ring(ncclComm_t comm, const std::string& codec, const std::string& data, size_t count,
                  int calls) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t bytes = count * sizeof(float);
  float *hin = nullptr, *hout = nullptr, *dsend = nullptr, *drecv = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&hin), bytes + 4));
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&hout), bytes + 4));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dsend), bytes + 4));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&drecv), bytes + 4));
  for (size_t i = 0; i < count; ++i)
    hin[i] = input_value(data, g_rank, i);
  for (int call = 0; call < calls; ++call) {
    for (int inplace = 0; inplace < 2; ++inplace) {
      for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
        float* out = inplace ? dsend : drecv;
        CUDA_OK(cudaMemcpyAsync(dsend, hin, bytes, cudaMemcpyHostToDevice, s));
        NCCL_OK(ncclAllReduce(dsend, out, count, ncclFloat32, op, comm, s));
        CUDA_OK(cudaMemcpyAsync(hout, out, bytes, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        ncclResult_t async = ncclSuccess;
        NCCL_OK(ncclCommGetAsyncError(comm, &async));
        std::string verdict = async != ncclSuccess
                                  ? std::string("FAIL async error ") + ncclGetErrorString(async)
                                  : verdict_for(data, codec, hout, count, op == ncclAvg);
        char name[160];
        std::snprintf(name, sizeof name, "%s/%s/n=%zu/%s/%s/call%d", codec.c_str(), data.c_str(),
                      count, op == ncclSum ? "sum" : "avg", inplace ? "inplace" : "outofplace",
                      call);
        report_case(name, hout, bytes, verdict);
      }
    }
  }
  cudaFree(dsend);
  cudaFree(drecv);
  cudaFreeHost(hin);
  cudaFreeHost(hout);
  cudaStreamDestroy(s);
  return 0;
}

bool finishes(cudaStream_t s, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Stream order through the API: a slow kernel before writes the input, a kernel after sums the
// output; ncclAllReduce returns while the stream is still busy; rank 0 calls 300 ms late, so the
// other ranks' streams wait for the call meanwhile, and another stream of theirs still runs.
int scenario_order(ncclComm_t comm, size_t count) {
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  float* x = nullptr;
  double* dsum = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), count * sizeof(float)));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dsum), sizeof(double)));
  CUDA_OK(cudaMemset(x, 0, count * sizeof(float)));
  // The communicator's first device AllReduce prepares its staging (pinned memory allocated and
  // the flag operations loaded on this thread, docs/cuda.md): a one-time cost, outside the call
  // timed below.
  NCCL_OK(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s1));
  CUDA_OK(cudaStreamSynchronize(s1));
  CUDA_OK(cudaMemset(x, 0, count * sizeof(float)));
  CUDA_OK(cudaDeviceSynchronize());
  if (g_rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CUDA_OK(sketchccl::gputest::fill_after_delay(x, count, static_cast<float>(g_rank), 200, s1));
  auto t0 = std::chrono::steady_clock::now();
  NCCL_OK(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s1));
  const double call_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CUDA_OK(sketchccl::gputest::sum_to(x, count, dsum, s1));
  std::string verdict = "OK";
  if (call_ms > 100)
    verdict = "FAIL ncclAllReduce blocked the caller for " + std::to_string(call_ms) + " ms";
  if (cudaStreamQuery(s1) != cudaErrorNotReady) verdict = "FAIL the stream was already idle";
  if (g_rank != 0) {
    // Our stream waits for the call until rank 0 joins; another stream must still run.
    CUDA_OK(sketchccl::gputest::spin_ms(2, s2));
    if (!finishes(s2, 5)) verdict = "FAIL another stream was blocked while the call waited";
  }
  if (!finishes(s1, 60)) verdict = "FAIL the AllReduce never completed on the stream";
  double got = 0;
  CUDA_OK(cudaMemcpy(&got, dsum, sizeof got, cudaMemcpyDeviceToHost));
  // x[i] = sum over ranks of (r + i % 7).
  double want = 0;
  for (size_t i = 0; i < count; ++i)
    for (int r = 0; r < g_nranks; ++r)
      want += r + static_cast<double>(i % 7);
  if (verdict == "OK" && got != want) {
    verdict = "FAIL sum after the AllReduce is " + std::to_string(got) + ", expected " +
              std::to_string(want);
  }
  report_case("order", &got, sizeof got, verdict);
  cudaFree(x);
  cudaFree(dsum);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  return 0;
}

// Two AllReduces on two streams inside a group: neither blocks, both complete.
int scenario_group(ncclComm_t comm, size_t count) {
  cudaStream_t s[2];
  float* d[2];
  std::vector<float> h(count);
  for (int k = 0; k < 2; ++k) {
    CUDA_OK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d[k]), count * sizeof(float)));
    for (size_t i = 0; i < count; ++i)
      h[i] = input_value("int", g_rank + k, i);
    CUDA_OK(cudaMemcpy(d[k], h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  }
  NCCL_OK(ncclGroupStart());
  for (int k = 0; k < 2; ++k)
    NCCL_OK(ncclAllReduce(d[k], d[k], count, ncclFloat32, ncclSum, comm, s[k]));
  NCCL_OK(ncclGroupEnd());
  std::string verdict = "OK";
  std::vector<float> out(count);
  for (int k = 0; k < 2; ++k) {
    if (!finishes(s[k], 60)) verdict = "FAIL group AllReduce did not complete";
    CUDA_OK(cudaMemcpy(out.data(), d[k], count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count && verdict == "OK"; ++i) {
      double want = 0;
      for (int r = 0; r < g_nranks; ++r)
        want += input_value("int", r + k, i);
      if (out[i] != want) verdict = "FAIL wrong value at " + std::to_string(i);
    }
    report_case("group" + std::to_string(k), out.data(), count * sizeof(float), verdict);
    cudaFree(d[k]);
    cudaStreamDestroy(s[k]);
  }
  return 0;
}

// Standalone mode refuses a capturing stream with ncclInvalidUsage (in front of a real NCCL
// the policy forwards it instead: tests/unit/interpose).
int scenario_capture(ncclComm_t comm, size_t count) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* d = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), count * sizeof(float)));
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  ncclResult_t r = ncclAllReduce(d, d, count, ncclFloat32, ncclSum, comm, s);
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  std::string verdict = "OK";
  if (r != ncclInvalidUsage) {
    verdict = std::string("FAIL capture gave ") + ncclGetErrorString(r);
  } else if (std::strstr(ncclGetLastError(comm), "captured") == nullptr) {
    verdict = std::string("FAIL message: ") + ncclGetLastError(comm);
  } else if (e != cudaSuccess) {
    verdict = std::string("FAIL capture broken: ") + cudaGetErrorString(e);
  }
  if (g != nullptr) cudaGraphDestroy(g);
  report_case("capture", &r, sizeof r, verdict);
  cudaFree(d);
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sketchccl::testing::WorkerArgs wa;
  if (!sketchccl::testing::parse_worker_args(argc, argv, &wa)) return 2;
  const std::string& scenario = wa.scenario;
  g_rank = wa.rank;
  g_nranks = wa.nranks;
  const ncclUniqueId& id = wa.id;
  CUDA_OK(cudaSetDevice(0));
  // Before any stream waits for a call: under lazy loading a kernel's first launch synchronizes
  // the device.
  CUDA_OK(sketchccl::gputest::preload_kernels());
  const char* codec_env = std::getenv("SKETCHCCL_CODEC");
  const std::string codec = codec_env ? codec_env : "auto";
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, id, g_rank));
  int dev = -1;
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  // In front of NCCL the real one answers (the fake NCCL knows no CUDA device).
  const char* lib = std::getenv("SKETCHCCL_NCCL_LIB");
  const bool standalone = lib != nullptr && std::strcmp(lib, "none") == 0;
  if (standalone && dev != 0) {
    report_case("cudevice", &dev, sizeof dev, "FAIL ncclCommCuDevice is not 0");
  }
  const size_t count = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 100000;
  if (scenario == "ring") {
    // COUNT may be a comma-separated list: one process start covers several sizes.
    const std::string counts = argc > 5 ? argv[5] : "100000";
    size_t pos = 0;
    while (pos <= counts.size()) {
      size_t end = counts.find(',', pos);
      if (end == std::string::npos) end = counts.size();
      if (end > pos) {
        scenario_ring(comm, codec, argc > 6 ? argv[6] : "int",
                      std::strtoull(counts.substr(pos, end - pos).c_str(), nullptr, 10), 2);
      }
      pos = end + 1;
    }
  } else if (scenario == "order") {
    scenario_order(comm, count);
  } else if (scenario == "group") {
    scenario_group(comm, count);
  } else if (scenario == "capture") {
    scenario_capture(comm, count);
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  sketchccl::testing::report_rung(comm);
  NCCL_OK(ncclCommDestroy(comm));
  return g_case_failures ? 1 : 0;
}
