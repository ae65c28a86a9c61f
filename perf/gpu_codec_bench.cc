// GPU codec throughput: GB/s of input (fp32 bytes) per codec for encode, the fused step and
// decode through the CUDA launchers (kernels/cuda/codec_cuda.h), next to a device-to-device
// cudaMemcpy measured in the same run (its GB/s counts the bytes copied once, so "copy GB/s"
// is the bar a one-pass codec over the same bytes can reach). Timed with CUDA events on one
// stream; decode includes its device verdict read (one synchronization), as the backend does.
//
//   sketchccl-gpu-codec-bench [--elems N[,N...]] [--iters N] [--codecs a,b,...] [--json FILE]
//
// Without a device it prints "no GPU: <reason>" and exits 0 (perf/gpu_check.sh relies on it).
#include <cuda_runtime_api.h>

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
  std::printf("%-7s %11s %10s %10s %10s %10s %9s\n", "codec", "elems", "copy_GB/s", "enc_GB/s",
              "step_GB/s", "dec_GB/s", "wire");
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
      // step from the fixed encoded packet into pk2 (not in place, so every iteration is alike)
      const double stp = time_ms(s, iters, [&] {
        OKS(cuda::step(p1, pk, bytes, y, ElemType::kF32, n, pk2, bytes, ws, wsb, s));
      });
      OKS(cuda::read_device_error(ws, s));
      const int dec_iters = p.codec == CodecId::kS2 ? std::max(1, iters / 4) : iters;
      const double dec = time_ms(s, dec_iters, [&] {
        OKS(cuda::decode(p1, pk2, bytes, z, ElemType::kF32, n, 1.0f, nullptr, ws, wsb, s));
        OKS(cuda::read_device_error(ws, s));
      });
      const double wire = static_cast<double>(bytes) / (n * 4.0);
      std::printf("%-7s %11zu %10.1f %10.1f %10.1f %10.1f %9.4f\n", name.c_str(), n,
                  gb / (copy_ms / 1e3), gb / (enc / 1e3), gb / (stp / 1e3), gb / (dec / 1e3), wire);
      std::fflush(stdout);
      if (jf) {
        std::fprintf(jf,
                     "%s  {\"codec\": \"%s\", \"elems\": %zu, \"copy_gbps\": %.3f, "
                     "\"encode_gbps\": %.3f, \"step_gbps\": %.3f, \"decode_gbps\": %.3f, "
                     "\"wire_ratio\": %.5f, \"device\": \"%s\"}",
                     first_json ? "" : ",\n", name.c_str(), n, gb / (copy_ms / 1e3),
                     gb / (enc / 1e3), gb / (stp / 1e3), gb / (dec / 1e3), wire, prop.name);
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
  return 0;
}
