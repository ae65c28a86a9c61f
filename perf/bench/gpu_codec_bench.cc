// GPU codec throughput: GB/s of input (fp32 bytes) per codec for encode, the fused step and
// decode through the CUDA launchers (kernels/cuda/codec_cuda.h), next to a device-to-device
// cudaMemcpy measured in the same run (its GB/s counts the bytes copied once, so "copy GB/s"
// is the bar a one-pass codec over the same bytes can reach), and each as a fraction of it.
// Timed with CUDA events on one stream, back to back without a synchronization per call: the
// step runs in place, as the backend runs it, on its own copy of the encoded packet per
// iteration (prepared before the clock starts); the device verdicts are read once at the end.
// Goals on H100/H200 (so that the codec never limits a 50 GB/s link): fused q8 step >= 0.6 of
// the copy, casq2 >= 0.25.
//
//   sketchccl-gpu-codec-bench [--elems N[,N...]] [--iters N] [--codecs a,b,...] [--json FILE]
//
// Without a device it prints "no GPU: <reason>" and exits 0 (perf/gpu/gpu_check.sh relies on it).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/cuda/codec_cuda.h"

namespace {

using namespace sketchccl;           // NOLINT
using namespace sketchccl::kernels;  // NOLINT

#define CK(call)                                                                                 \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

#define OKS(expr)                                                                     \
  do {                                                                                \
    Status s_ = (expr);                                                               \
    if (!s_.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s_.to_string().c_str()); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

template <typename F>
double time_ms(cudaStream_t s, int iters, F&& body) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  body();  // warm-up
  CK(cudaStreamSynchronize(s));
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i)
    body();
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms / iters;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {262144, size_t(1) << 25};
  int iters = 20;
  std::vector<std::string> codecs = {"none", "bf16",  "fp16",  "q8",    "q4",
                                     "q2",   "casq2", "casq3", "casq4", "s2"};
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--elems") {
      sizes.clear();
      for (const auto& e : split(v))
        sizes.push_back(std::strtoull(e.c_str(), nullptr, 10));
    } else if (k == "--iters") {
      iters = std::atoi(v.c_str());
    } else if (k == "--codecs") {
      codecs = split(v);
    } else if (k == "--json") {
      json = v;
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# device 0: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
              prop.minor);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (jf) std::fprintf(jf, "[\n");
  bool first_json = true;
  std::printf("%-7s %11s %10s %10s %10s %10s %9s %6s %6s %6s\n", "codec", "elems", "copy_GB/s",
              "enc_GB/s", "step_GB/s", "dec_GB/s", "wire", "enc/cp", "stp/cp", "dec/cp");
  bool goals_met = true;
  for (size_t n : sizes) {
    std::vector<float> h(n);
    std::mt19937 g(7);
    std::normal_distribution<float> nd;
    for (auto& v : h)
      v = nd(g);
    void *x = nullptr, *y = nullptr, *z = nullptr;
    CK(cudaMalloc(&x, n * 4));
    CK(cudaMalloc(&y, n * 4));
    CK(cudaMalloc(&z, n * 4));
    CK(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, h.data(), n * 4, cudaMemcpyHostToDevice));
    const double copy_ms =
        time_ms(s, iters, [&] { CK(cudaMemcpyAsync(z, x, n * 4, cudaMemcpyDeviceToDevice, s)); });
    const double gb = n * 4.0 / 1e9;
    for (const std::string& name : codecs) {
      CodecParams p;
      if (!codec_from_name(name.c_str(), &p.codec) || p.codec == CodecId::kSparse) {
        std::fprintf(stderr, "skipping codec %s\n", name.c_str());
        continue;
      }
      p.seed = 1;
      p.call = 1;
      if (p.codec == CodecId::kS2) p.s2_counters = s2_counters_for_budget(n, p.s2_rows, 0.25);
      const size_t bytes = packet_bytes(p, n);
      CodecParams p1 = p;
      p1.step = 1;
      const size_t wsb = cuda::workspace_bytes(p, n);
      void *pk = nullptr, *pk2 = nullptr, *ws = nullptr;
      CK(cudaMalloc(&pk, bytes));
      CK(cudaMalloc(&pk2, bytes));
      CK(cudaMalloc(&ws, wsb));
      OKS(cuda::encode(p, x, ElemType::kF32, n, pk, bytes, ws, wsb, s));
      const double enc = time_ms(
          s, iters, [&] { OKS(cuda::encode(p, x, ElemType::kF32, n, pk2, bytes, ws, wsb, s)); });
      // The step in place, each iteration on its own copy of the encoded packet (as many copies
      // as fit in a quarter of the free memory), so that no copy is timed and all are alike.
      size_t free_b = 0, total_b = 0;
      CK(cudaMemGetInfo(&free_b, &total_b));
      const int reps =
          static_cast<int>(std::max<size_t>(1, std::min<size_t>(iters + 1, free_b / 4 / bytes)));
      std::vector<void*> pks(reps, nullptr);
      for (void*& q : pks) {
        CK(cudaMalloc(&q, bytes));
        CK(cudaMemcpyAsync(q, pk, bytes, cudaMemcpyDeviceToDevice, s));
      }
      int next = 0;
      const double stp = time_ms(s, std::max(1, reps - 1), [&] {
        void* q = pks[static_cast<size_t>(next++ % reps)];
        OKS(cuda::step(p1, q, bytes, y, ElemType::kF32, n, q, bytes, ws, wsb, s));
      });
      OKS(cuda::read_device_error(ws, s));
      const int dec_iters = p.codec == CodecId::kS2 ? std::max(1, iters / 4) : iters;
      const double dec = time_ms(s, dec_iters, [&] {
        OKS(cuda::decode(p1, pks[0], bytes, z, ElemType::kF32, n, 1.0f, nullptr, ws, wsb, s));
      });
      OKS(cuda::read_device_error(ws, s));
      for (void* q : pks)
        CK(cudaFree(q));
      const double wire = static_cast<double>(bytes) / (n * 4.0);
      // Fractions of the copy: the same input bytes in the same time would be 1.0.
      const double fe = copy_ms / enc, fs = copy_ms / stp, fd = copy_ms / dec;
      std::printf("%-7s %11zu %10.1f %10.1f %10.1f %10.1f %9.4f %6.2f %6.2f %6.2f\n", name.c_str(),
                  n, gb / (copy_ms / 1e3), gb / (enc / 1e3), gb / (stp / 1e3), gb / (dec / 1e3),
                  wire, fe, fs, fd);
      const double goal = p.codec == CodecId::kQ8 ? 0.6 : p.codec == CodecId::kCasq2 ? 0.25 : 0;
      if (goal > 0 && n >= (size_t(1) << 24)) {
        std::printf("#   goal: %s step %.2f of the copy, goal %.2f: %s\n", name.c_str(), fs, goal,
                    fs >= goal ? "met" : "MISSED");
        goals_met = goals_met && fs >= goal;
      }
      std::fflush(stdout);
      if (jf) {
        std::fprintf(jf,
                     "%s  {\"codec\": \"%s\", \"elems\": %zu, \"copy_gbps\": %.3f, "
                     "\"encode_gbps\": %.3f, \"step_gbps\": %.3f, \"decode_gbps\": %.3f, "
                     "\"wire_ratio\": %.5f, \"encode_of_copy\": %.3f, \"step_of_copy\": %.3f, "
                     "\"decode_of_copy\": %.3f, \"device\": \"%s\"}",
                     first_json ? "" : ",\n", name.c_str(), n, gb / (copy_ms / 1e3),
                     gb / (enc / 1e3), gb / (stp / 1e3), gb / (dec / 1e3), wire, fe, fs, fd,
                     prop.name);
        first_json = false;
      }
      CK(cudaFree(pk));
      CK(cudaFree(pk2));
      CK(cudaFree(ws));
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(z));
  }
  if (jf) {
    std::fprintf(jf, "\n]\n");
    std::fclose(jf);
  }
  // Goals are reported, not enforced: the exit status is for errors.
  std::printf("# goals (q8 step >= 0.6, casq2 step >= 0.25 of a D2D copy, 2^24+ elements): %s\n",
              goals_met ? "met or not measured" : "MISSED");
  return 0;
}
