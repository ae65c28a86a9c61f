// Which CPU path the codecs' block kernels run on (generic loops, AVX2, AVX-512: the ops of
// cpu_ops_generic.h, cpu_ops_avx2.h, cpu_ops_avx512.h), chosen once by the CPU or per thread by a
// test, and the sparse helpers' and s2's bulk kernels on that path. SCCL_X86_SIMD says whether
// the x86 paths are built at all.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SCCL_X86_SIMD 1
#endif

namespace sketchccl::kernels::detail {

enum class CpuPath : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
// The path the codecs use: the best the CPU has, unless a CpuPathScope of this thread says
// otherwise.
CpuPath cpu_path();
bool cpu_path_available(CpuPath p);
// Runs the codecs of this thread on path p (for tests comparing the paths); p must be available.
class CpuPathScope {
 public:
  explicit CpuPathScope(CpuPath p);
  ~CpuPathScope();
  CpuPathScope(const CpuPathScope&) = delete;
  CpuPathScope& operator=(const CpuPathScope&) = delete;

 private:
  int prev_;
};

// Bulk kernels of the sparse helpers and s2 on the path cpu_path() picks (whole 64-element
// words of fp32): bits[w] = the non-zero elements (NaN is non-zero, -0 zero) of x[64w, 64w + 64);
// y[64w + j] = vals[k] * scale for the k-th set bit of the words, +0 elsewhere (returns the
// values read).
void cpu_nonzero_words(const float* x, size_t words, uint64_t* bits);
size_t cpu_scatter_words(const uint64_t* bits, size_t words, const float* vals, float scale,
                         float* y);

}  // namespace sketchccl::kernels::detail
