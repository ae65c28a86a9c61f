// The AVX-512 CPU path's drivers: kernels/host/codec_paths.inc over cpu_ops_avx512.h's Avx512Ops
// (x86 intrinsics, AVX-512 F, BW, DQ and VL), taken where the CPU has them.
#include "kernels/host/codec_paths.h"
#include "kernels/host/cpu_ops_avx512.h"

#if defined(SCCL_X86_SIMD)
#define SCCL_PATH_NS path_avx512
#define SCCL_PATH_OPS Avx512Ops
#define SCCL_PATH_ENTRY SCCL_AVX512_TARGET
#define SCCL_PATH_INLINE SCCL_AVX512_INLINE
#define SCCL_PATH_DRIVERS kAvx512PathDrivers
#include "kernels/host/codec_path_drivers.inc"  // NOLINT: the path's file body
#endif
