// One rank of the first-contact GPU tests (tests/gpu/first_contact_test.cc),
// through nccl.h only, standalone, all ranks on device 0.
//
//   first_contact_worker SCENARIO RANK NRANKS ID_HEX [COUNT [ID2_HEX]]
//
// Scenarios: held_first (the process's first AllReduce, of SKETCHCCL_CODEC, on a stream held by
// a slow kernel; also run under CUDA_LAUNCH_BLOCKING=1), second_stream (under
// CUDA_DEVICE_MAX_CONNECTIONS=1: the call is staged and returns while its stream is busy; it,
// work after it and a second stream's work complete), capture_thread (another thread captures a
// graph in global mode during the first two taken-over calls), growing_buckets (larger
// AllReduces queued while earlier ones hold the stream), two_comms (two communicators on two
// streams), abort_held (ncclCommAbort while the caller's stream waits for the call). Prints
// rank_report.h's CASE lines.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/api/rank_report.h"
#include "tests/gpu/cuda_ok.h"
#include "tests/gpu/test_kernels.h"

namespace {

using sketchccl::testing::g_case_failures;
using sketchccl::testing::input_value;
using sketchccl::testing::report_case;

int g_rank = 0, g_nranks = 1;

// Polls `s` for up to `seconds`: true when it completed.
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

std::vector<float> inputs(const std::string& data, size_t count) {
  std::vector<float> h(count);
  for (size_t i = 0; i < count; ++i)
    h[i] = input_value(data, g_rank, i);
  return h;
}

// "OK" when `out` is the sum of every rank's inputs within the codec's NMSE bound.
std::string check_sum(const std::string& codec, const std::string& data, const float* out,
                      size_t count) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int r = 0; r < g_nranks; ++r)
      s += input_value(data, r, i);
    if (!std::isfinite(out[i])) return "FAIL non-finite output";
    err += (out[i] - s) * (out[i] - s);
    ref += s * s;
  }
  const double nmse = ref > 0 ? err / ref : err;
  const double bound = sketchccl::testing::codec_nmse_bound(codec);
  if (nmse > bound) {
    char why[96];
    std::snprintf(why, sizeof why, "FAIL nmse %.3g > bound %.3g", nmse, bound);
    return why;
  }
  return "OK";
}

std::string data_for(const std::string& codec) {
  return codec == "none" ? "int" : codec == "sparse" || codec == "s2" ? "sparse" : "gauss";
}

// The process's first AllReduce (every kernel's first use) on a stream a slow kernel holds.
void held_first(ncclComm_t comm, const std::string& codec, size_t count) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::string data = data_for(codec);
  std::vector<float> in = inputs(data, count), out(count);
  float* x = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), count * sizeof(float)));
  CUDA_OK(sketchccl::gputest::spin_ms(300, s));
  CUDA_OK(cudaMemcpyAsync(x, in.data(), count * sizeof(float), cudaMemcpyHostToDevice, s));
  NCCL_OK(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s));
  CUDA_OK(cudaMemcpyAsync(out.data(), x, count * sizeof(float), cudaMemcpyDeviceToHost, s));
  std::string verdict = finishes(s, 90) ? check_sum(codec, data, out.data(), count)
                                        : "FAIL the first AllReduce never completed (hang)";
  report_case("held_first_" + codec, out.data(), count * sizeof(float), verdict);
  cudaFree(x);
  cudaStreamDestroy(s);
}

// Under CUDA_DEVICE_MAX_CONNECTIONS=1 every stream shares one hardware queue. A staged call puts
// nothing there but its own copies and flag operations on the caller's stream, and the proxy
// makes no CUDA call: the AllReduce is staged as anywhere else and returns while the slow kernel
// before it still runs. It, the work queued after it on its stream, and a second stream's work
// (queued behind the held stream on the one queue) all complete.
void second_stream(ncclComm_t comm, size_t count) {
  cudaStream_t s1, s2;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  float* x = nullptr;
  double* dsum = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), count * sizeof(float)));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dsum), sizeof(double)));
  CUDA_OK(sketchccl::gputest::fill_after_delay(x, count, static_cast<float>(g_rank), 100, s1));
  NCCL_OK(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s1));
  const bool staged = cudaStreamQuery(s1) == cudaErrorNotReady;
  CUDA_OK(sketchccl::gputest::sum_to(x, count, dsum, s1));  // dependent work after the call
  CUDA_OK(sketchccl::gputest::spin_ms(5, s2));
  std::string verdict =
      staged ? "OK" : "FAIL the AllReduce waited for its stream (it was not staged)";
  if (!finishes(s2, 30)) verdict = "FAIL the second stream did not complete";
  if (!finishes(s1, 90)) verdict = "FAIL the AllReduce's stream did not complete (hang)";
  double got = 0, want = 0;
  if (verdict == "OK") CUDA_OK(cudaMemcpy(&got, dsum, sizeof got, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; ++i)
    for (int r = 0; r < g_nranks; ++r)
      want += r + static_cast<double>(i % 7);
  if (verdict == "OK" && got != want) verdict = "FAIL wrong sum " + std::to_string(got);
  report_case("second_stream", &want, sizeof want, verdict);
  cudaFree(x);
  cudaFree(dsum);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// Another thread captures a graph in global mode (PyTorch's default) while this thread, in
// global mode too, makes its first taken-over AllReduce (its staging memory is allocated and its
// flag operations prepared then) and a second one: neither SketchCCL's calls on this thread nor the
// proxy's may invalidate that capture. The test's own polling runs relaxed, so only SketchCCL's
// calls count.
void capture_thread(ncclComm_t comm, size_t count) {
  auto set_mode = [](cudaStreamCaptureMode m) { CUDA_OK(cudaThreadExchangeStreamCaptureMode(&m)); };
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> in = inputs("int", count), out(count);
  float* x = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), count * sizeof(float)));
  CUDA_OK(cudaMemcpy(x, in.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  std::atomic<int> phase{0};
  cudaError_t capture_end = cudaErrorUnknown, capture_run = cudaErrorUnknown;
  std::thread capturer([&] {
    cudaStream_t cs;
    if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess) {
      phase = 3;
      return;
    }
    if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) == cudaSuccess) {
      (void)sketchccl::gputest::spin_ms(1, cs);
      phase = 1;
      while (phase.load() != 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      cudaGraph_t g = nullptr;
      capture_end = cudaStreamEndCapture(cs, &g);
      if (capture_end == cudaSuccess) {
        cudaGraphExec_t ge = nullptr;
        capture_run = cudaGraphInstantiate(&ge, g, 0);
        if (capture_run == cudaSuccess) capture_run = cudaGraphLaunch(ge, cs);
        if (capture_run == cudaSuccess) capture_run = cudaStreamSynchronize(cs);
        if (ge != nullptr) cudaGraphExecDestroy(ge);
      }
      if (g != nullptr) cudaGraphDestroy(g);
    }
    phase = 3;
    cudaStreamDestroy(cs);
  });
  while (phase.load() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool done = phase.load() == 1;
  for (int call = 0; call < 2 && done; ++call) {
    set_mode(cudaStreamCaptureModeGlobal);
    const ncclResult_t r = ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s);
    set_mode(cudaStreamCaptureModeRelaxed);
    done = r == ncclSuccess && finishes(s, 90);
    if (done && call == 0) {
      CUDA_OK(cudaMemcpy(x, in.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    }
  }
  phase = 2;
  capturer.join();
  CUDA_OK(cudaMemcpy(out.data(), x, count * sizeof(float), cudaMemcpyDeviceToHost));
  std::string verdict =
      !done ? "FAIL an AllReduce failed or never completed"
      : capture_end != cudaSuccess
          ? std::string("FAIL the other thread's capture broke: ") + cudaGetErrorString(capture_end)
      : capture_run != cudaSuccess
          ? std::string("FAIL the captured graph did not run: ") + cudaGetErrorString(capture_run)
          : check_sum("none", "int", out.data(), count);
  report_case("capture_thread", out.data(), count * sizeof(float), verdict);
  cudaFree(x);
  cudaStreamDestroy(s);
}

// Two communicators of the same ranks, each on its own stream, calls interleaved.
void two_comms(ncclComm_t a, ncclComm_t b, size_t count) {
  cudaStream_t sa, sb;
  CUDA_OK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  std::vector<float> in = inputs("int", count), oa(count), ob(count);
  float *xa = nullptr, *xb = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&xa), count * sizeof(float)));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&xb), count * sizeof(float)));
  for (int round = 0; round < 3; ++round) {
    CUDA_OK(cudaMemcpyAsync(xa, in.data(), count * sizeof(float), cudaMemcpyHostToDevice, sa));
    CUDA_OK(cudaMemcpyAsync(xb, in.data(), count * sizeof(float), cudaMemcpyHostToDevice, sb));
    NCCL_OK(ncclAllReduce(xa, xa, count, ncclFloat32, ncclSum, a, sa));
    NCCL_OK(ncclAllReduce(xb, xb, count, ncclFloat32, ncclSum, b, sb));
  }
  CUDA_OK(cudaMemcpyAsync(oa.data(), xa, count * sizeof(float), cudaMemcpyDeviceToHost, sa));
  CUDA_OK(cudaMemcpyAsync(ob.data(), xb, count * sizeof(float), cudaMemcpyDeviceToHost, sb));
  std::string verdict = "OK";
  if (!finishes(sa, 90) || !finishes(sb, 90)) verdict = "FAIL a stream never completed";
  if (verdict == "OK") verdict = check_sum("none", "int", oa.data(), count);
  if (verdict == "OK") verdict = check_sum("none", "int", ob.data(), count);
  report_case("two_comms", oa.data(), count * sizeof(float), verdict);
  cudaFree(xa);
  cudaFree(xb);
  cudaStreamDestroy(sa);
  cudaStreamDestroy(sb);
}

// DDP's pattern: a small first bucket, then larger ones queued while the earlier ones still hold
// the stream, so new staging blocks are allocated while the stream waits. All must complete.
void growing_buckets(ncclComm_t comm, size_t count) {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t sizes[] = {count / 25, count / 5, count, count};
  std::vector<float> in = inputs("int", count), out(count);
  std::vector<float*> bufs;
  for (size_t n : sizes) {
    float* x = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)));
    CUDA_OK(cudaMemcpyAsync(x, in.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    NCCL_OK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, s));
    bufs.push_back(x);
  }
  std::string verdict = finishes(s, 120) ? "OK" : "FAIL the buckets never completed";
  for (size_t b = 0; b < bufs.size() && verdict == "OK"; ++b) {
    CUDA_OK(cudaMemcpy(out.data(), bufs[b], sizes[b] * sizeof(float), cudaMemcpyDeviceToHost));
    verdict = check_sum("none", "int", out.data(), sizes[b]);
  }
  report_case("growing_buckets", out.data(), count * sizeof(float), verdict);
  for (float* x : bufs)
    cudaFree(x);
  cudaStreamDestroy(s);
}

// Rank 0's stream waits for an AllReduce the other ranks never join; ncclCommAbort must let the
// stream go on within seconds.
void abort_held(ncclComm_t comm, size_t count) {
  const int zero = 0;
  if (g_rank != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ncclCommAbort(comm);
    report_case("abort_held", &zero, sizeof zero, "OK");
    return;
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* x = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&x), count * sizeof(float)));
  CUDA_OK(cudaMemset(x, 0, count * sizeof(float)));
  NCCL_OK(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, comm, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::string verdict = cudaStreamQuery(s) == cudaErrorNotReady ? "OK" : "FAIL not held";
  const auto t0 = std::chrono::steady_clock::now();
  ncclCommAbort(comm);
  if (verdict == "OK" && !finishes(s, 20)) verdict = "FAIL the stream stayed held after abort";
  const double s_taken =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (verdict == "OK" && s_taken > 15) verdict = "FAIL abort took " + std::to_string(s_taken);
  report_case("abort_held", &zero, sizeof zero, verdict);
  cudaFree(x);
  cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
  sketchccl::testing::WorkerArgs wa;
  if (!sketchccl::testing::parse_worker_args(argc, argv, &wa)) return 2;
  g_rank = wa.rank;
  g_nranks = wa.nranks;
  CUDA_OK(cudaSetDevice(0));
  // Before any stream waits for a call: under lazy loading a kernel's first launch synchronizes
  // the device.
  CUDA_OK(sketchccl::gputest::preload_kernels());
  const char* codec_env = std::getenv("SKETCHCCL_CODEC");
  const std::string codec = codec_env ? codec_env : "none";
  const size_t count = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 100000;
  ncclComm_t comm = nullptr;
  NCCL_OK(ncclCommInitRank(&comm, g_nranks, wa.id, g_rank));
  if (wa.scenario == "held_first") {
    held_first(comm, codec, count);
  } else if (wa.scenario == "second_stream") {
    second_stream(comm, count);
  } else if (wa.scenario == "capture_thread") {
    capture_thread(comm, count);
  } else if (wa.scenario == "growing_buckets") {
    growing_buckets(comm, count);
  } else if (wa.scenario == "two_comms") {
    ncclUniqueId id2;
    if (argc < 7 || !sketchccl::testing::parse_id_hex(argv[6], &id2)) return 2;
    ncclComm_t b = nullptr;
    NCCL_OK(ncclCommInitRank(&b, g_nranks, id2, g_rank));
    two_comms(comm, b, count);
    NCCL_OK(ncclCommDestroy(b));
  } else if (wa.scenario == "abort_held") {
    abort_held(comm, count);
    return g_case_failures ? 1 : 0;  // the communicator is gone
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", wa.scenario.c_str());
    return 2;
  }
  NCCL_OK(ncclCommDestroy(comm));
  return g_case_failures ? 1 : 0;
}
