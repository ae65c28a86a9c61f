// sketchccl-codec-bench: per-codec encode / step / decode throughput on one core (GB/s of fp32
// input) next to a memcpy baseline, wire bytes per input byte, and NMSE on four generated inputs
// (Gaussian, Laplace, 1%- and 10%-dense sparse). Each benchmark also times a memcpy of the same
// 1 MiB on its thread right after its own loop and reports its speed over memcpy's
// (`x_memcpy`): the ratio the goals are stated in, side by side even when the machine's load
// changes during a run. The NMSE table is printed first, as markdown; `--nmse_only` stops
// there. Other flags are Google Benchmark's (e.g. --benchmark_filter=q8).
#include <benchmark/benchmark.h>
#include <time.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec.h"

namespace sk = sketchccl::kernels;

namespace {

constexpr size_t kN = 262144;  // one default slice: SKETCHCCL_SLICE_BYTES = 1 MiB of fp32
constexpr int kRanks = 8;

const sk::CodecId kCodecs[] = {sk::CodecId::kNone,  sk::CodecId::kBf16,  sk::CodecId::kFp16,
                               sk::CodecId::kQ8,    sk::CodecId::kQ4,    sk::CodecId::kQ2,
                               sk::CodecId::kCasq2, sk::CodecId::kCasq3, sk::CodecId::kCasq4,
                               sk::CodecId::kS2,    sk::CodecId::kQ8r,   sk::CodecId::kQ4r,
                               sk::CodecId::kQ2r};

enum class Dist { kGauss, kLaplace, kSparse1, kSparse10 };
const char* const kDistNames[] = {"Gaussian", "Laplace", "sparse 1%", "sparse 10%"};

std::vector<float> make(Dist d, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed * 1000003 + 11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::exponential_distribution<float> expo(1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (d) {
      case Dist::kGauss:
        x = normal(g);
        break;
      case Dist::kLaplace:
        x = (uni(g) < 0.5f ? -1.0f : 1.0f) * expo(g);
        break;
      case Dist::kSparse1:
        x = uni(g) < 0.01f ? normal(g) : 0.0f;
        break;
      case Dist::kSparse10:
        x = uni(g) < 0.10f ? normal(g) : 0.0f;
        break;
    }
  }
  return v;
}

// s2 budget as the engine sets it after the first call: 1.3 counters per union non-zero.
sk::CodecParams params(sk::CodecId c, size_t support) {
  sk::CodecParams p;
  p.codec = c;
  p.seed = 7;
  p.call = 1;
  p.s2_rows = 3;
  p.s2_counters = sk::s2_counters_for_support(support, 3, 1.3);
  return p;
}

size_t support_of(const std::vector<float>& v) {
  size_t s = 0;
  for (float x : v)
    s += x != 0.0f;
  return s;
}

struct Aligned {
  std::vector<uint64_t> w;
  explicit Aligned(size_t bytes) : w(bytes / 8 + 1) {}
  void* data() { return w.data(); }
};

double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double e = 0, s = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    e += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    s += double(ref[i]) * ref[i];
  }
  return e / s;
}

// NMSE of one encode+decode, and of an 8-rank ring (encode, 7 steps, decode) against the sum.
void nmse_table() {
  std::printf("NMSE (one slice of %zu elements; 'ring' = sum over %d ranks, encode + %d steps)\n\n",
              kN, kRanks, kRanks - 1);
  std::printf("| codec |");
  for (const char* d : kDistNames)
    std::printf(" %s: wire, NMSE 1 hop, NMSE ring |", d);
  std::printf("\n|---|---|---|---|---|\n");
  std::vector<std::vector<std::vector<float>>> data(4);
  for (int d = 0; d < 4; ++d) {
    for (int r = 0; r < kRanks; ++r)
      data[d].push_back(make(Dist(d), kN, 100 * d + r));
  }
  for (sk::CodecId c : kCodecs) {
    std::printf("| %s |", sk::codec_name(c));
    for (int d = 0; d < 4; ++d) {
      const auto& xs = data[d];
      std::vector<float> sum(xs[0]);
      for (int r = 1; r < kRanks; ++r) {
        for (size_t i = 0; i < kN; ++i)
          sum[i] += xs[r][i];
      }
      // One hop: the s2 budget from the slice's own support; ring: from the union support.
      double e1, e8, wire;
      {
        sk::CodecParams p = params(c, support_of(xs[0]));
        size_t b = sk::packet_bytes(p, kN);
        Aligned pk(b);
        std::vector<float> y(kN);
        if (!sk::encode(p, xs[0].data(), sk::ElemType::kF32, kN, pk.data(), b).ok() ||
            !sk::decode(p, pk.data(), b, y.data(), sk::ElemType::kF32, kN, 1, nullptr).ok()) {
          std::printf(" error |");
          continue;
        }
        e1 = nmse(xs[0], y);
      }
      {
        sk::CodecParams p = params(c, support_of(sum));
        size_t b = sk::packet_bytes(p, kN);
        wire = double(b) / (4.0 * kN);
        Aligned a(b), o(b);
        bool ok = sk::encode(p, xs[0].data(), sk::ElemType::kF32, kN, a.data(), b).ok();
        for (int r = 1; r < kRanks && ok; ++r) {
          p.step = uint32_t(r);
          ok = sk::step(p, a.data(), b, xs[r].data(), sk::ElemType::kF32, kN, o.data(), b).ok();
          std::swap(a.w, o.w);
        }
        std::vector<float> y(kN);
        ok = ok && sk::decode(p, a.data(), b, y.data(), sk::ElemType::kF32, kN, 1, nullptr).ok();
        e8 = ok ? nmse(sum, y) : NAN;
      }
      std::printf(" %.4f, %.2e, %.2e |", wire, e1, e8);
    }
    std::printf("\n");
  }
  std::printf("\n");
}

// ---- throughput
// ----------------------------------------------------------------------------------
struct Fixture {
  std::vector<float> x, y;
  sk::CodecParams p;
  size_t bytes;
  Aligned a, b;
  explicit Fixture(sk::CodecId c)
      : x(make(c == sk::CodecId::kS2 ? Dist::kSparse1 : Dist::kLaplace, kN, 1)),
        y(kN),
        p(params(c, 2 * support_of(x))),
        bytes(sk::packet_bytes(p, kN)),
        a(bytes),
        b(bytes) {
    (void)sk::encode(p, x.data(), sk::ElemType::kF32, kN, a.data(), bytes);
    p.step = 1;
  }
};

double thread_ns() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// CPU ns of one memcpy of the slice (x into y), over about 20 ms of them.
double memcpy_ns(Fixture& f) {
  const double t0 = thread_ns();
  int reps = 0;
  do {
    std::memcpy(f.y.data(), f.x.data(), kN * 4);
    benchmark::ClobberMemory();
    ++reps;
  } while (thread_ns() - t0 < 2e7);
  return (thread_ns() - t0) / reps;
}

// t0: thread_ns() before the benchmark's loop.
void finish(benchmark::State& st, Fixture& f, double t0) {
  const double op_ns = (thread_ns() - t0) / double(st.iterations());
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kN * 4));
  st.counters["wire/in"] = double(f.bytes) / (4.0 * kN);
  st.counters["x_memcpy"] = memcpy_ns(f) / op_ns;
}

void BM_encode(benchmark::State& st, sk::CodecId c) {
  Fixture f(c);
  const double t0 = thread_ns();
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        sk::encode(f.p, f.x.data(), sk::ElemType::kF32, kN, f.b.data(), f.bytes).ok());
    benchmark::ClobberMemory();
  }
  finish(st, f, t0);
}

void BM_step(benchmark::State& st, sk::CodecId c) {
  Fixture f(c);
  const double t0 = thread_ns();
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        sk::step(f.p, f.a.data(), f.bytes, f.x.data(), sk::ElemType::kF32, kN, f.b.data(), f.bytes)
            .ok());
    benchmark::ClobberMemory();
  }
  finish(st, f, t0);
}

void BM_decode(benchmark::State& st, sk::CodecId c) {
  Fixture f(c);
  const double t0 = thread_ns();
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        sk::decode(f.p, f.a.data(), f.bytes, f.y.data(), sk::ElemType::kF32, kN, 1.0f, nullptr)
            .ok());
    benchmark::ClobberMemory();
  }
  finish(st, f, t0);
}

void BM_memcpy(benchmark::State& st) {
  std::vector<float> x(kN, 1.0f), y(kN);
  for (auto _ : st) {
    std::memcpy(y.data(), x.data(), kN * 4);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kN * 4));
}

}  // namespace

int main(int argc, char** argv) {
  bool nmse_only = false;
  for (int i = 1; i < argc; ++i)
    nmse_only |= std::string(argv[i]) == "--nmse_only";
  nmse_table();
  if (nmse_only) return 0;
  benchmark::RegisterBenchmark("memcpy", BM_memcpy);
  for (sk::CodecId c : kCodecs) {
    std::string n = sk::codec_name(c);
    benchmark::RegisterBenchmark(("encode/" + n).c_str(), BM_encode, c);
    benchmark::RegisterBenchmark(("step/" + n).c_str(), BM_step, c);
    benchmark::RegisterBenchmark(("decode/" + n).c_str(), BM_decode, c);
  }
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) != "--nmse_only") args.push_back(argv[i]);
  }
  int ac = int(args.size());
  benchmark::Initialize(&ac, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
