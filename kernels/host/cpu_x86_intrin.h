// <immintrin.h> for the x86 paths' block kernels (cpu_ops_avx2.h, cpu_ops_avx512.h), where the
// compiler targets x86-64 (SCCL_X86_SIMD, cpu_path.h).
#pragma once

#include "kernels/host/cpu_path.h"

#if defined(SCCL_X86_SIMD)
// GCC 12 warns about the intrinsics' own undefined pass-through operands once they are inlined
// (its uninitialized-use warnings check the header's lines): off for the header alone.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif
