// sketchccl-stream-stress [NRANKS [ITERS]] -- the stream gate against hardware-queue sharing.
//
// Each rank (a process of its own, on device 0, standalone through nccl.h) creates 64
// non-blocking streams before its communicator, so that the backend's streams share hardware
// queues with them (CUDA_DEVICE_MAX_CONNECTIONS, set by the caller, says how many there are).
// Then ITERS times, on one stream: a kernel, ncclAllReduce, a host function, a kernel; and a
// short kernel on another of the 64. A host function queued behind the gate's spin kernel blocks
// its queue until the spin ends: if a backend stream shares that queue, the AllReduce never
// completes. Prints "RESULT: ok" (every sum right), "RESULT: hang ..." or "RESULT: wrong ...";
// exit 0, 1, or 77 without a GPU. perf/gpu/gpu_check.sh runs it under 2, 4 and 8 queues.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_launch.h"

namespace {

constexpr size_t kCount = size_t(1) << 20;  // 4 MiB of float: above SKETCHCCL_MIN_BYTES
constexpr int kStreams = 64;
constexpr double kWaitSeconds = 15;  // past SKETCHCCL_TIMEOUT=10, inside the caller's 25 s

__global__ void fill(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void accumulate(const float* x, float* acc, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    acc[i] += x[i];
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

void CUDART_CB noop(void*) {}

bool ok(cudaError_t e, const char* what, int rank) {
  if (e == cudaSuccess) return true;
  std::printf("rank %d: RESULT: error: %s: %s\n", rank, what, cudaGetErrorString(e));
  return false;
}

bool ok(ncclResult_t r, const char* what, int rank) {
  if (r == ncclSuccess) return true;
  std::printf("rank %d: RESULT: error: %s: %s\n", rank, what, ncclGetErrorString(r));
  return false;
}

// Polls `s` for up to kWaitSeconds: true when all its work completed.
bool completes(cudaStream_t s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(kWaitSeconds);
  while (std::chrono::steady_clock::now() < end) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

int run_rank(int rank, int nranks, int iters, const ncclUniqueId& id) {
  if (!ok(cudaSetDevice(0), "cudaSetDevice", rank)) return 1;
  std::vector<cudaStream_t> streams(kStreams);
  for (auto& s : streams)
    if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream", rank)) return 1;
  ncclComm_t comm;
  if (!ok(ncclCommInitRank(&comm, nranks, id, rank), "ncclCommInitRank", rank)) return 1;
  float *x = nullptr, *acc = nullptr;
  if (!ok(cudaMalloc(&x, kCount * sizeof(float)), "cudaMalloc", rank) ||
      !ok(cudaMalloc(&acc, kCount * sizeof(float)), "cudaMalloc", rank) ||
      !ok(cudaMemset(acc, 0, kCount * sizeof(float)), "cudaMemset", rank))
    return 1;
  cudaStream_t s = streams[0];
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    SCCL_LAUNCH(256, 256, 0, s, fill)(x, kCount, float(rank + 1));
    if (!ok(ncclAllReduce(x, x, kCount, ncclFloat, ncclSum, comm, s), "ncclAllReduce", rank))
      return 1;
    if (!ok(cudaLaunchHostFunc(s, noop, nullptr), "cudaLaunchHostFunc", rank)) return 1;
    SCCL_LAUNCH(256, 256, 0, s, accumulate)(x, acc, kCount);
    SCCL_LAUNCH(1, 1, 0, streams[1 + i % (kStreams - 1)], spin)(100000);
    if (!ok(cudaGetLastError(), "kernel launch", rank)) return 1;
  }
  if (!completes(s)) {
    std::printf("rank %d: RESULT: hang: the stream did not complete within %.0f s\n", rank,
                kWaitSeconds);
    std::fflush(stdout);
    _exit(1);  // the communicator is stuck: destroying it could wait forever
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> h(kCount);
  if (!ok(cudaMemcpy(h.data(), acc, kCount * sizeof(float), cudaMemcpyDeviceToHost), "copy", rank))
    return 1;
  const float want = float(iters) * float(nranks) * float(nranks + 1) / 2;
  size_t bad = 0;
  for (float v : h)
    bad += v != want;
  ncclCommDestroy(comm);
  if (bad != 0) {
    std::printf("rank %d: RESULT: wrong: %zu of %zu sums differ from %g (e.g. %g)\n", rank, bad,
                kCount, double(want), double(h[0]));
    return 1;
  }
  std::printf("rank %d: RESULT: ok: %d iterations in %.3f s\n", rank, iters, secs);
  return 0;
}

std::string to_hex(const ncclUniqueId& id) {
  std::string hex;
  char b[3];
  for (char c : id.internal) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  return hex;
}

bool from_hex(const char* hex, ncclUniqueId* id) {
  if (std::strlen(hex) != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("SKETCHCCL_NCCL_LIB", "none", 0);
  setenv("SKETCHCCL_MIN_BYTES", "0", 0);
  setenv("SKETCHCCL_CODEC", "none", 0);  // exact sums, so that the result is checked bit for bit
  if (argc == 6 && std::strcmp(argv[1], "--rank") == 0) {
    ncclUniqueId id;
    if (!from_hex(argv[5], &id)) return 2;
    return run_rank(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), id);
  }
  const int nranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("RESULT: skipped: no GPU\n");
    return 77;
  }
  const char* q = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf(
      "stream stress: %d ranks, %d iterations, %d streams, CUDA_DEVICE_MAX_CONNECTIONS=%s\n",
      nranks, iters, kStreams, q ? q : "(unset)");
  std::fflush(stdout);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::printf("RESULT: error: ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  const std::string hex = to_hex(id);
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string rs = std::to_string(r), ns = std::to_string(nranks),
                        is = std::to_string(iters);
      execl("/proc/self/exe", argv[0], "--rank", rs.c_str(), ns.c_str(), is.c_str(), hex.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
  }
  std::printf("RESULT: %s (%d of %d ranks failed)\n", failed ? "FAILED" : "ok", failed, nranks);
  return failed ? 1 : 0;
}
