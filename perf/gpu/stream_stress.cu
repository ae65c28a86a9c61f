// sketchccl-stream-stress [options] -- staged device AllReduces beside a busy application.
//
// The device path stages a call on the caller's stream (docs/cuda.md): copy in, a flag, a wait
// for the proxy's flag, copy back, a flag; the proxy runs the host engine and makes no CUDA
// call. This program puts that path next to what an application does elsewhere and checks that
// nothing waits for itself. Each rank is a process of its own on device 0 (ranks share one GPU):
//
//   - 64 application streams (by default every other one at the device's greatest priority, from
//     cudaDeviceGetStreamPriorityRange; --priority greatest: all of them; --priority default:
//     none), with short kernels and host functions queued on them in every round;
//   - the calls' stream: a blocking stream at the least priority; each round a kernel filling the
//     input, ncclAllReduce (float32, sum), a host function, a kernel accumulating the result;
//     in front of NCCL (--in-front) an int32 ncclAllReduce -- forwarded to NCCL by the policy --
//     right behind the taken-over float one on the same stream, and its own accumulation;
//   - an application thread (unless --no-app-thread), from before the first call until the
//     stream is done: cudaFree(cudaMalloc(64 MiB)), a 64 MiB pageable device-to-host cudaMemcpy
//     (the legacy stream: it waits for the blocking calls' stream) and cudaHostAlloc/cudaFreeHost.
//
// Checks, per rank: every float and int sum exact (SKETCHCCL_CODEC=none unless set), the stream,
// the 64 streams and the application thread done within --wait seconds, and the communicator's
// statistics (SKETCHCCL_STATS_FILE, one JSON line at ncclCommDestroy, redirected per rank here):
// proxy_cuda_calls 0, the float calls taken over (calls_taken), in front the int32 calls
// forwarded (calls_forwarded), under SKETCHCCL_DEVICE_CODECS=device every float call on the
// second rung (device_codec_calls). The parent kills every rank still running after --timeout
// seconds.
//
// Prints per rank "rank R: RESULT: ok ..." or "rank R: RESULT: <wrong|hang|stuck|stats|error> ...",
// and last "RESULT: ok|FAILED|timeout (...)". Exit 0 every rank passed; 1 a rank failed (wrong
// sum, proxy_cuda_calls != 0, a call not taken over or not forwarded, an error); 124 the parent's
// timeout; 77 no GPU; 2 a usage error.
//
// Options: --ranks N (2), --iters N (20), --elems N (1<<20 floats per call), --wait S (30),
// --timeout S (wait + 30), --priority mixed|greatest|default (mixed), --no-app-thread,
// --app-mib N (64), --no-preload (the kernels not loaded before the first call), --in-front (needs SKETCHCCL_NCCL_LIB naming a real libnccl; each rank gets
// NCCL_HOSTID=sccl-stress-rR, so NCCL and SketchCCL see one rank per node).
// Standalone (the default) sets SKETCHCCL_NCCL_LIB=none.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_launch.h"

namespace {

constexpr int kStreams = 64;
constexpr int kStreamsPerRound = 8;  // application streams given a kernel and a host function

struct Options {
  int ranks = 2;
  int iters = 20;
  size_t elems = size_t(1) << 20;  // 4 MiB of float: several slices, above any MIN_BYTES
  double wait_s = 30;
  double timeout_s = 0;  // 0: wait_s + 30
  std::string priority = "mixed";
  bool app_thread = true;
  size_t app_mib = 64;
  bool in_front = false;
  bool preload = true;
};

__global__ void fill_f(float* x, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void acc_f(const float* x, float* acc, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    acc[i] += x[i];
}

__global__ void fill_i(int32_t* x, size_t n, int32_t v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void acc_i(const int32_t* x, int32_t* acc, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    acc[i] += x[i];
}

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

std::atomic<long> g_host_fns{0};
void CUDART_CB count_host_fn(void*) { g_host_fns.fetch_add(1, std::memory_order_relaxed); }

int g_rank = -1;

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("rank %d: RESULT: error: %s: %s\n", g_rank, what, cudaGetErrorString(e));
  std::fflush(stdout);
  return false;
}

bool ok(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::printf("rank %d: RESULT: error: %s: %s\n", g_rank, what, ncclGetErrorString(r));
  std::fflush(stdout);
  return false;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `s` for up to wait_s: true when all its work completed.
bool completes(cudaStream_t s, double wait_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) < wait_s) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      ok(e, "cudaStreamQuery");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// The application thread: what a framework's allocator and a data loader do beside the calls.
struct AppThread {
  std::atomic<bool> stop{false};
  std::atomic<bool> finished{false};
  std::atomic<bool> failed{false};
  std::atomic<long> rounds{0};
  std::atomic<long> entered{0};  // CUDA calls of the loop entered so far
  std::atomic<const char*> doing{"starting"};
  size_t bytes = 0;

  void run() {
    pthread_setname_np(pthread_self(), "app-thread");  // named in the emulator's reports
    if (cudaSetDevice(0) != cudaSuccess) {
      failed = true;
      finished = true;
      return;
    }
    void* dev = nullptr;
    std::vector<char> pageable(bytes);
    doing = "cudaMalloc (the copy's source)";
    if (cudaMalloc(&dev, bytes) != cudaSuccess || cudaMemset(dev, 1, bytes) != cudaSuccess) {
      failed = true;
      finished = true;
      return;
    }
    while (!stop.load()) {
      void* p = nullptr;
      doing = "cudaMalloc";
      entered.fetch_add(1);
      if (cudaMalloc(&p, bytes) != cudaSuccess) failed = true;
      doing = "cudaFree";
      entered.fetch_add(1);
      if (p != nullptr && cudaFree(p) != cudaSuccess) failed = true;
      doing = "a pageable device-to-host cudaMemcpy";
      entered.fetch_add(1);
      if (cudaMemcpy(pageable.data(), dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        failed = true;
      void* h = nullptr;
      doing = "cudaHostAlloc";
      entered.fetch_add(1);
      if (cudaHostAlloc(&h, size_t(4) << 20, cudaHostAllocDefault) != cudaSuccess) failed = true;
      doing = "cudaFreeHost";
      entered.fetch_add(1);
      if (h != nullptr && cudaFreeHost(h) != cudaSuccess) failed = true;
      doing = "between rounds";
      rounds.fetch_add(1);
      if (failed.load()) break;
    }
    doing = "cudaFree (the copy's source)";
    cudaFree(dev);
    doing = "done";
    finished = true;
  }
};

// "key": N in one JSON line; -1 when absent.
long long json_field(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\": ";
  const size_t at = line.find(k);
  if (at == std::string::npos) return -1;
  return std::atoll(line.c_str() + at + k.size());
}

int run_rank(const Options& o, int rank, const ncclUniqueId& id) {
  g_rank = rank;
  pthread_setname_np(pthread_self(), ("rank-" + std::to_string(rank)).c_str());
  const int n = o.ranks;
  if (!ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  int least = 0, greatest = 0;
  if (!ok(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"))
    return 1;
  // The application's streams before the communicator, so that they come first everywhere.
  std::vector<cudaStream_t> streams(kStreams);
  int at_greatest = 0;
  for (int i = 0; i < kStreams; ++i) {
    const bool top = o.priority == "greatest" || (o.priority == "mixed" && i % 2 == 0);
    at_greatest += top;
    if (!ok(cudaStreamCreateWithPriority(&streams[i], cudaStreamNonBlocking,
                                         top ? greatest : least),
            "cudaStreamCreateWithPriority"))
      return 1;
  }
  cudaStream_t s = nullptr;
  if (!ok(cudaStreamCreateWithPriority(&s, cudaStreamDefault, least), "the calls' stream"))
    return 1;
  ncclComm_t comm;
  if (!ok(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank")) return 1;
  const size_t count = o.elems;
  float *x = nullptr, *acc = nullptr;
  int32_t *ix = nullptr, *iacc = nullptr;
  if (!ok(cudaMalloc(&x, count * sizeof(float)), "cudaMalloc") ||
      !ok(cudaMalloc(&acc, count * sizeof(float)), "cudaMalloc") ||
      !ok(cudaMemset(acc, 0, count * sizeof(float)), "cudaMemset"))
    return 1;
  if (o.in_front &&
      (!ok(cudaMalloc(&ix, count * sizeof(int32_t)), "cudaMalloc") ||
       !ok(cudaMalloc(&iacc, count * sizeof(int32_t)), "cudaMalloc") ||
       !ok(cudaMemset(iacc, 0, count * sizeof(int32_t)), "cudaMemset")))
    return 1;
  // A warm application: its kernels are loaded before the first call. Else (--no-preload) the
  // first launch of acc_f comes behind a held stream; with lazy loading that launch may have to
  // wait for the device (the emulator's strict mode calls it a deadlock unless the stream's
  // releaser is another thread: CUDAEMU_RELEASERS=sccl-proxy).
  if (o.preload) {
    cudaFuncAttributes fa;
    if (!ok(cudaFuncGetAttributes(&fa, fill_f), "cudaFuncGetAttributes") ||
        !ok(cudaFuncGetAttributes(&fa, acc_f), "cudaFuncGetAttributes") ||
        !ok(cudaFuncGetAttributes(&fa, fill_i), "cudaFuncGetAttributes") ||
        !ok(cudaFuncGetAttributes(&fa, acc_i), "cudaFuncGetAttributes") ||
        !ok(cudaFuncGetAttributes(&fa, spin), "cudaFuncGetAttributes"))
      return 1;
  }
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;

  AppThread app;
  app.bytes = o.app_mib << 20;
  std::thread app_thread;
  if (o.app_thread) {
    app_thread = std::thread([&app] { app.run(); });
    // The thread is in its loop before the first call is enqueued.
    while (app.entered.load() == 0 && !app.finished.load())
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const long entered0 = app.entered.load();

  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kStreams; ++i) SCCL_LAUNCH(1, 32, 0, streams[i], spin)(2000);
  for (int it = 0; it < o.iters; ++it) {
    SCCL_LAUNCH(64, 128, 0, s, fill_f)(x, count, float(rank + 1));
    if (o.in_front) SCCL_LAUNCH(64, 128, 0, s, fill_i)(ix, count, int32_t(rank + 1));
    if (!ok(ncclAllReduce(x, x, count, ncclFloat, ncclSum, comm, s), "ncclAllReduce(float)"))
      return 1;
    // Right behind the taken-over call, on the same stream: NCCL's own kernel.
    if (o.in_front &&
        !ok(ncclAllReduce(ix, ix, count, ncclInt32, ncclSum, comm, s), "ncclAllReduce(int32)"))
      return 1;
    if (!ok(cudaLaunchHostFunc(s, count_host_fn, nullptr), "cudaLaunchHostFunc")) return 1;
    SCCL_LAUNCH(64, 128, 0, s, acc_f)(x, acc, count);
    if (o.in_front) SCCL_LAUNCH(64, 128, 0, s, acc_i)(ix, iacc, count);
    for (int k = 0; k < kStreamsPerRound; ++k) {
      cudaStream_t a = streams[(it * kStreamsPerRound + k) % kStreams];
      SCCL_LAUNCH(1, 32, 0, a, spin)(20000);
      if (!ok(cudaLaunchHostFunc(a, count_host_fn, nullptr), "cudaLaunchHostFunc")) return 1;
    }
    if (!ok(cudaGetLastError(), "kernel launch")) return 1;
  }
  const double enqueued = since(t0);
  if (!completes(s, o.wait_s)) {
    std::printf("rank %d: RESULT: hang: the calls' stream did not complete within %.0f s "
                "(application thread: %ld rounds, now in %s)\n",
                rank, o.wait_s, app.rounds.load(), app.doing.load());
    std::fflush(stdout);
    _exit(1);  // the communicator is stuck: destroying it could wait forever
  }
  const double secs = since(t0);
  // CUDA calls the application thread entered while the calls ran (the one it was in included).
  const long app_calls_during = app.entered.load() - entered0 + 1;
  for (int i = 0; i < kStreams; ++i) {
    if (!completes(streams[i], o.wait_s)) {
      std::printf("rank %d: RESULT: hang: application stream %d did not complete\n", rank, i);
      std::fflush(stdout);
      _exit(1);
    }
  }
  if (o.app_thread) {
    app.stop = true;
    const auto tj = std::chrono::steady_clock::now();
    while (!app.finished.load() && since(tj) < o.wait_s)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (!app.finished.load()) {
      std::printf("rank %d: RESULT: stuck: the application thread did not return from %s "
                  "within %.0f s\n",
                  rank, app.doing.load(), o.wait_s);
      std::fflush(stdout);
      _exit(1);
    }
    app_thread.join();
    if (app.failed.load()) {
      std::printf("rank %d: RESULT: error: a CUDA call of the application thread failed (%s)\n",
                  rank, app.doing.load());
      return 1;
    }
  }

  const float want = float(o.iters) * float(n) * float(n + 1) / 2;
  std::vector<float> h(count);
  if (!ok(cudaMemcpy(h.data(), acc, count * sizeof(float), cudaMemcpyDeviceToHost), "copy"))
    return 1;
  size_t bad = 0;
  for (float v : h) bad += v != want;
  size_t ibad = 0;
  int32_t ifirst = 0;
  if (o.in_front) {
    std::vector<int32_t> hi(count);
    if (!ok(cudaMemcpy(hi.data(), iacc, count * sizeof(int32_t), cudaMemcpyDeviceToHost), "copy"))
      return 1;
    ifirst = hi[0];
    for (int32_t v : hi) ibad += v != int32_t(want);
  }
  if (!ok(ncclCommDestroy(comm), "ncclCommDestroy")) return 1;

  // The statistics, written at ncclCommDestroy.
  std::string line;
  if (const char* path = std::getenv("SKETCHCCL_STATS_FILE")) {
    std::ifstream f(path);
    std::string l;
    while (std::getline(f, l))
      if (!l.empty()) line = l;
  }
  const long long proxy_cuda = json_field(line, "proxy_cuda_calls");
  const long long taken = json_field(line, "calls_taken");
  const long long forwarded = json_field(line, "calls_forwarded");

  int failures = 0;
  std::ostringstream why;
  if (bad != 0) {
    why << " wrong: " << bad << " of " << count << " float sums differ from " << want
        << " (e.g. " << h[0] << ");";
    ++failures;
  }
  if (ibad != 0) {
    why << " wrong: " << ibad << " of " << count << " int32 sums (forwarded) differ from "
        << int32_t(want) << " (e.g. " << ifirst << ");";
    ++failures;
  }
  if (line.empty() || proxy_cuda < 0) {
    why << " stats: no proxy_cuda_calls in SKETCHCCL_STATS_FILE;";
    ++failures;
  } else if (proxy_cuda != 0) {
    why << " stats: proxy_cuda_calls = " << proxy_cuda << " (must be 0);";
    ++failures;
  }
  if (taken >= 0 && taken < o.iters) {
    why << " stats: only " << taken << " of " << o.iters << " float calls taken over;";
    ++failures;
  }
  // SKETCHCCL_DEVICE_CODECS=device: every float call ran its codec on the stream (docs/cuda.md).
  const char* rung = std::getenv("SKETCHCCL_DEVICE_CODECS");
  const long long on_stream = json_field(line, "device_codec_calls");
  if (rung != nullptr && std::strcmp(rung, "device") == 0 && on_stream < o.iters) {
    why << " stats: only " << on_stream << " of " << o.iters
        << " float calls ran their codec on the stream (device_codec_calls);";
    ++failures;
  }
  if (o.in_front && forwarded >= 0 && forwarded < o.iters) {
    why << " stats: only " << forwarded << " of " << o.iters << " int32 calls forwarded;";
    ++failures;
  }
  std::printf(
      "rank %d: RESULT: %s: %d rounds in %.3f s (enqueued in %.3f s), %d of %d application streams "
      "at the greatest priority (%d), application thread: %ld CUDA calls during the calls, host "
      "functions %ld; stats: calls_taken %lld, calls_forwarded %lld, proxy_cuda_calls %lld%s\n",
      rank, failures ? "FAILED" : "ok", o.iters, secs, enqueued, at_greatest, kStreams, greatest,
      o.app_thread ? app_calls_during : 0L, g_host_fns.load(), taken, forwarded, proxy_cuda,
      why.str().c_str());
  std::fflush(stdout);
  return failures ? 1 : 0;
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

int usage() {
  std::fprintf(stderr,
               "usage: sketchccl-stream-stress [--ranks N] [--iters N] [--elems N] [--wait S] "
               "[--timeout S] [--priority mixed|greatest|default] [--no-app-thread] "
               "[--app-mib N] [--no-preload] [--in-front]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int rank = -1;
  const char* id_hex = nullptr;
  std::vector<std::string> passed;  // the options, for the ranks
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--rank") {
      if (!(v = val())) return usage();
      rank = std::atoi(v);
      continue;
    }
    if (a == "--id") {
      if (!(id_hex = val())) return usage();
      continue;
    }
    passed.push_back(a);
    if (a == "--no-app-thread") {
      o.app_thread = false;
    } else if (a == "--no-preload") {
      o.preload = false;
    } else if (a == "--in-front") {
      o.in_front = true;
    } else if (a == "--ranks" || a == "--iters" || a == "--elems" || a == "--wait" ||
               a == "--timeout" || a == "--priority" || a == "--app-mib") {
      if (!(v = val())) return usage();
      passed.push_back(v);
      if (a == "--ranks") o.ranks = std::atoi(v);
      if (a == "--iters") o.iters = std::atoi(v);
      if (a == "--elems") o.elems = std::strtoull(v, nullptr, 10);
      if (a == "--wait") o.wait_s = std::atof(v);
      if (a == "--timeout") o.timeout_s = std::atof(v);
      if (a == "--priority") o.priority = v;
      if (a == "--app-mib") o.app_mib = std::strtoull(v, nullptr, 10);
    } else {
      return usage();
    }
  }
  if (o.ranks < 1 || o.iters < 1 || o.elems < 1 || o.app_mib < 1 ||
      (o.priority != "mixed" && o.priority != "greatest" && o.priority != "default"))
    return usage();
  if (o.timeout_s <= 0) o.timeout_s = o.wait_s + 30;
  if (!o.in_front) setenv("SKETCHCCL_NCCL_LIB", "none", 1);
  setenv("SKETCHCCL_MIN_BYTES", "0", 0);
  setenv("SKETCHCCL_CODEC", "none", 0);  // exact sums, so that the result is checked bit for bit
  if (rank >= 0) {
    ncclUniqueId id;
    if (id_hex == nullptr || !from_hex(id_hex, &id)) return 2;
    return run_rank(o, rank, id);
  }

  const char* lib = std::getenv("SKETCHCCL_NCCL_LIB");
  if (o.in_front && (lib == nullptr || *lib == '\0' || std::strcmp(lib, "none") == 0)) {
    std::printf("RESULT: error: --in-front needs SKETCHCCL_NCCL_LIB naming a real libnccl\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("RESULT: skipped: no GPU\n");
    return 77;
  }
  const char* q = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf("stream stress: %s, %d ranks on device 0, %d rounds of %zu floats, %d streams "
              "(priority %s), application thread %s (%zu MiB), CUDA_DEVICE_MAX_CONNECTIONS=%s, "
              "SKETCHCCL_CODEC=%s\n",
              o.in_front ? "in front of NCCL (int32 calls forwarded behind the float ones)"
                         : "standalone",
              o.ranks, o.iters, o.elems, kStreams, o.priority.c_str(),
              o.app_thread ? "on" : "off", o.app_mib, q ? q : "(unset)",
              std::getenv("SKETCHCCL_CODEC"));
  std::fflush(stdout);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::printf("RESULT: error: ncclGetUniqueId: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  const std::string hex = to_hex(id);
  const char* tmp = std::getenv("TMPDIR");
  const std::string stats_base = std::string(tmp && *tmp ? tmp : "/tmp") + "/sccl-stress-" +
                                 std::to_string(getpid()) + "-r";
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    const std::string stats = stats_base + std::to_string(r) + ".jsonl";
    unlink(stats.c_str());
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("SKETCHCCL_STATS_FILE", stats.c_str(), 1);
      if (o.in_front) setenv("NCCL_HOSTID", ("sccl-stress-r" + std::to_string(r)).c_str(), 1);
      std::vector<std::string> args = {argv[0], "--rank", std::to_string(r), "--id", hex};
      args.insert(args.end(), passed.begin(), passed.end());
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0, left = o.ranks;
  bool timed_out = false;
  std::vector<bool> done(o.ranks, false);
  while (left > 0) {
    for (int r = 0; r < o.ranks; ++r) {
      if (done[r]) continue;
      int st = 0;
      const pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p == 0) continue;
      done[r] = true;
      --left;
      if (p < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        ++failed;
        if (p > 0 && WIFSIGNALED(st))
          std::printf("rank %d: killed by signal %d\n", r, WTERMSIG(st));
      }
    }
    if (left > 0 && since(t0) > o.timeout_s) {
      timed_out = true;
      for (int r = 0; r < o.ranks; ++r) {
        if (done[r]) continue;
        std::printf("rank %d: RESULT: timeout: still running after %.0f s, killed\n", r,
                    o.timeout_s);
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        done[r] = true;
        ++failed;
      }
      left = 0;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < o.ranks; ++r) unlink((stats_base + std::to_string(r) + ".jsonl").c_str());
  std::printf("RESULT: %s (%d of %d ranks failed, %.2f s)\n",
              timed_out ? "timeout" : failed ? "FAILED" : "ok", failed, o.ranks, since(t0));
  return timed_out ? 124 : failed ? 1 : 0;
}
