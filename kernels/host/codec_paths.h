// The CPU paths' drivers as codec_host.cc calls them: kernels/host/codec_paths.inc stamped once
// per path, each path in a file of its own (codec_host_generic.cc, codec_host_avx2.cc,
// codec_host_avx512.cc, so that they compile in parallel), reached through a table of entry
// points that cpu_path_drivers() picks by cpu_path(). Private to kernels/host/.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/codec.h"
#include "kernels/host/cpu_path.h"

// The linear codecs' loops are compiled for the baseline x86-64 and for x86-64-v2 (SSE4.2: 32-bit
// multiplies and min/max, which the hash and the range need), v3 (AVX2) and v4 (AVX-512),
// picked once at load time by the CPU (GCC function multi-versioning). Only the
// vector width differs: no FMA contraction (-ffp-contract=off), the same IEEE operations, so
// every clone writes the same bytes (tests/unit/kernels/codec_golden_test.cc pins them).
// -DSCCL_NO_CPU_CLONES builds the baseline alone (to measure it).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(SCCL_NO_CPU_CLONES)
#define SCCL_CPU_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v2", "arch=x86-64-v3", "arch=x86-64-v4")))
// The fp16/q*/CASQ drivers' generic path runs only where AVX2 is missing (their AVX2 and AVX-512
// paths are their own), so its v3 and v4 clones would be dead code and compile time.
#define SCCL_GENERIC_PATH_CLONES __attribute__((target_clones("default", "arch=x86-64-v2")))
#else
#define SCCL_CPU_CLONES
#define SCCL_GENERIC_PATH_CLONES
#endif

namespace sketchccl::kernels::detail {

// One path's entry points. The q* and CASQ drivers take the codec's bits from its row of
// kernels/codecs.def and the element type at run time.
struct CpuPathDrivers {
  void (*half_run)(const uint16_t* a, const float* x, size_t n, uint16_t* o);
  uint64_t (*half_decode)(const uint16_t* a, size_t n, float mult, float* y);
  void (*bf16_run)(const uint16_t* a, const float* x, size_t n, uint16_t* o);
  uint64_t (*bf16_decode)(const uint16_t* a, size_t n, float mult, float* y);
  void (*nonzero_words)(const float* x, size_t words, uint64_t* bits);
  size_t (*scatter_words)(const uint64_t* bits, size_t words, const float* vals, float scale,
                          float* y);
  void (*q_run)(ElemType t, const CodecParams& p, const uint8_t* in, const void* x, size_t n,
                uint8_t* out);
  uint64_t (*q_decode)(ElemType t, const CodecParams& p, const uint8_t* in, size_t n, void* y,
                       float scale);
  void (*casq_run)(ElemType t, const CodecParams& p, const uint8_t* in, const void* x, size_t n,
                   uint8_t* out);
  uint64_t (*casq_decode)(ElemType t, const CodecParams& p, const uint8_t* pkt, size_t n, void* y,
                          float scale);
};

extern const CpuPathDrivers kGenericPathDrivers;
#if defined(SCCL_X86_SIMD)
extern const CpuPathDrivers kAvx2PathDrivers;
extern const CpuPathDrivers kAvx512PathDrivers;
#endif

// The drivers of the path cpu_path() picks.
inline const CpuPathDrivers& cpu_path_drivers() {
#if defined(SCCL_X86_SIMD)
  switch (cpu_path()) {
    case CpuPath::kAvx512:
      return kAvx512PathDrivers;
    case CpuPath::kAvx2:
      return kAvx2PathDrivers;
    default:
      break;
  }
#endif
  return kGenericPathDrivers;
}

// Writes the header a packet for (p, n) carries at pkt.
void put_header(const CodecParams& p, size_t n, void* pkt);

}  // namespace sketchccl::kernels::detail
