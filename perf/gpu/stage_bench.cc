// sketchccl-stage-bench [options] -- the staged device path's time against the host path.
//
// In-process ranks (threads, one communicator each, standalone, all on device 0), per size and
// codec: the host call on host buffers (Communicator::submit_reduction, waited for), the device
// call staged on the rank's stream as whole buffers (SKETCHCCL_STAGE_CHUNK_BYTES=0) and in chunks
// (--chunk), each from the call to cudaStreamSynchronize. The ranks start each call together
// (a barrier), the three paths in turn call after call; a call's time is the slowest rank's; the
// median of --iters calls after one warm-up is printed, with the pipeline's gain (whole / chunked).
// On the emulated runtime (cudaemu) the copies are the emulator's memcpy on its queue threads, so
// the figures weigh the pipeline's overlap on this machine's cores, not a GPU's PCIe (docs/cuda.md,
// "Chunks").
//
// Options: --ranks N (2), --mib LIST (4,16,64), --codecs LIST (none,q8), --iters N (3),
// --chunk BYTES (4194304), --slice BYTES (SKETCHCCL_SLICE_BYTES). Exit 0; 77 without a device;
// 1 on an error or a result that differs between the three paths (exact codec: every element;
// a lossy one: bit for bit against the host call).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/coll/comm.h"
#include "src/core/config.h"

namespace sketchccl {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int ranks = 2;
  std::vector<size_t> mib = {4, 16, 64};
  std::vector<std::string> codecs = {"none", "q8"};
  int iters = 3;
  size_t chunk = size_t(4) << 20;
  size_t slice = 0;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The ranks' threads start each call together.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = round_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++round_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return round_ != round; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int waiting_ = 0;
  uint64_t round_ = 0;
};

enum class Path { kHost, kWhole, kChunked };
const char* path_name(Path p) {
  return p == Path::kHost ? "host" : p == Path::kWhole ? "staged whole" : "staged chunks";
}

struct Ranks {
  std::vector<std::shared_ptr<coll::Communicator>> comms;
  Ranks(int n, const coll::Settings& s) {
    coll::UniqueId id{};
    if (!coll::Communicator::bootstrap_make_id(&id).ok()) return;
    for (int r = 0; r < n; ++r) {
      coll::Communicator::InitArgs a;
      a.rank = r;
      a.nranks = n;
      a.id = id;
      a.cuda_device = 0;
      comms.push_back(coll::Communicator::create(a, s, 1));
    }
    for (auto& c : comms)
      if (!c->init_work()->wait().ok()) comms.clear();
  }
  ~Ranks() {
    for (auto& c : comms)
      c->abort();
  }
};

// The three paths at one size, interleaved call by call (so that a machine whose load changes
// weighs on each alike): per path the median of the calls' times (the slowest rank's), in
// seconds, negative on an error; each rank's last result of each path into results[p][r].
void run_paths(const Options& o, coll::Settings s, size_t count, double t[3],
               std::vector<std::vector<float>> results[3]) {
  std::unique_ptr<Ranks> ranks[3];
  for (int p = 0; p < 3; ++p) {
    s.stage_chunk_bytes = static_cast<Path>(p) == Path::kChunked ? o.chunk : 0;
    ranks[p] = std::make_unique<Ranks>(o.ranks, s);
    results[p].assign(static_cast<size_t>(o.ranks), {});
  }
  const int calls = o.iters + 1;
  const size_t nr = static_cast<size_t>(o.ranks);
  // took[p][r][k]
  std::vector<std::vector<std::vector<double>>> took(
      3, std::vector<std::vector<double>>(nr, std::vector<double>(static_cast<size_t>(calls))));
  Barrier sync(o.ranks);
  std::vector<bool> ok(3 * nr, true);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      const size_t ur = static_cast<size_t>(r);
      const size_t bytes = count * sizeof(float);
      std::vector<float> x(count), y(count, 0.f);
      for (size_t i = 0; i < count; ++i)
        x[i] = static_cast<float>((i * 7 + ur * 13) % 1000) * 0.01f - 5.f;
      void *dx = nullptr, *dy = nullptr;
      cudaStream_t stream = nullptr;
      const bool dev_ok = cudaSetDevice(0) == cudaSuccess &&
                          cudaMalloc(&dx, bytes) == cudaSuccess &&
                          cudaMalloc(&dy, bytes) == cudaSuccess &&
                          cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess &&
                          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
      for (int k = 0; k < calls; ++k) {
        for (int p = 0; p < 3; ++p) {
          const bool device = static_cast<Path>(p) != Path::kHost;
          const size_t at = static_cast<size_t>(p) * nr + ur;
          coll::ReductionArgs a;
          a.count = count;
          a.type = kernels::ElemType::kF32;
          a.send = device ? dx : x.data();
          a.recv = device ? dy : y.data();
          a.mem = device ? backend::MemoryType::kDevice : backend::MemoryType::kHost;
          sync.arrive_and_wait();
          const auto t0 = Clock::now();
          if (ok[at] && !ranks[p]->comms.empty() && (dev_ok || !device)) {
            coll::Communicator& c = *ranks[p]->comms[ur];
            if (device) {
              ok[at] = c.submit_reduction_stream(a, stream).ok() &&
                       cudaStreamSynchronize(stream) == cudaSuccess;
            } else {
              ok[at] = c.submit_reduction(a)->wait().ok();
            }
          } else {
            ok[at] = false;
          }
          took[static_cast<size_t>(p)][ur][static_cast<size_t>(k)] =
              std::chrono::duration<double>(Clock::now() - t0).count();
          if (k + 1 == calls && ok[at]) {
            std::vector<float> out(count);
            if (device) {
              ok[at] = cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
            } else {
              out = y;
            }
            results[p][ur] = std::move(out);
          }
        }
      }
      cudaFree(dx);
      cudaFree(dy);
      if (stream != nullptr) cudaStreamDestroy(stream);
    });
  }
  for (auto& th : threads)
    th.join();
  for (int p = 0; p < 3; ++p) {
    t[p] = -1;
    bool all = true;
    for (size_t r = 0; r < nr; ++r)
      all = all && ok[static_cast<size_t>(p) * nr + r];
    if (!all) continue;
    std::vector<double> per_call;
    for (int k = 1; k < calls; ++k) {
      double worst = 0;
      for (size_t r = 0; r < nr; ++r)
        worst = std::max(worst, took[static_cast<size_t>(p)][r][static_cast<size_t>(k)]);
      per_call.push_back(worst);
    }
    std::sort(per_call.begin(), per_call.end());
    t[p] = per_call[per_call.size() / 2];
  }
}

int bench(const Options& o) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("no CUDA device\n");
    return 77;
  }
  std::printf("%d ranks, %d calls each (median), chunks of %zu bytes (at most 16)\n", o.ranks,
              o.iters, o.chunk);
  std::printf("%8s %6s %12s %12s %12s %8s\n", "MiB", "codec", "host ms", "whole ms", "chunks ms",
              "gain");
  int rc = 0;
  for (const std::string& codec : o.codecs) {
    coll::Settings s;
    s.auto_codec = false;
    if (!coll::codec_setting(var_spec(Var::kCodec), codec, &s.codec).ok()) {
      std::printf("unknown codec %s\n", codec.c_str());
      return 2;
    }
    s.error_feedback = false;
    s.max_nmse = 0;
    if (o.slice != 0) s.slice_elems = o.slice / sizeof(float);
    for (size_t mib : o.mib) {
      const size_t count = (mib << 20) / sizeof(float);
      double t[3];
      std::vector<std::vector<float>> res[3];
      run_paths(o, s, count, t, res);
      for (int p = 0; p < 3; ++p) {
        if (t[p] < 0) {
          std::printf("%zu MiB %s: the %s path failed\n", mib, codec.c_str(),
                      path_name(static_cast<Path>(p)));
          rc = 1;
        }
      }
      for (int p = 1; p < 3; ++p) {
        for (int r = 0; r < o.ranks; ++r) {
          if (res[p][static_cast<size_t>(r)] != res[0][static_cast<size_t>(r)]) {
            std::printf("%zu MiB %s: rank %d's %s result differs from the host call's\n", mib,
                        codec.c_str(), r, path_name(static_cast<Path>(p)));
            rc = 1;
          }
        }
      }
      std::printf("%8zu %6s %12.1f %12.1f %12.1f %7.2fx\n", mib, codec.c_str(), t[0] * 1e3,
                  t[1] * 1e3, t[2] * 1e3, t[2] > 0 ? t[1] / t[2] : 0.0);
      std::fflush(stdout);
    }
  }
  return rc;
}

}  // namespace
}  // namespace sketchccl

int main(int argc, char** argv) {
  sketchccl::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    ++i;
    if (a == "--ranks") {
      o.ranks = std::atoi(v);
    } else if (a == "--mib") {
      o.mib.clear();
      for (const std::string& m : sketchccl::split(v))
        o.mib.push_back(std::strtoull(m.c_str(), nullptr, 10));
    } else if (a == "--codecs") {
      o.codecs = sketchccl::split(v);
    } else if (a == "--iters") {
      o.iters = std::atoi(v);
    } else if (a == "--chunk") {
      o.chunk = std::strtoull(v, nullptr, 10);
    } else if (a == "--slice") {
      o.slice = std::strtoull(v, nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: sketchccl-stage-bench [--ranks N] [--mib LIST] [--codecs LIST] "
                   "[--iters N] [--chunk BYTES] [--slice BYTES]\n");
      return 2;
    }
  }
  if (o.ranks < 1 || o.iters < 1 || o.mib.empty() || o.codecs.empty()) return 2;
  return sketchccl::bench(o);
}
