// The AVX2 CPU path's drivers: kernels/host/codec_paths.inc over cpu_ops_avx2.h's Avx2Ops (x86
// intrinsics, AVX2 and F16C), taken where the CPU has them and no AVX-512.
#include "kernels/host/codec_paths.h"
#include "kernels/host/cpu_ops_avx2.h"

#if defined(SCCL_X86_SIMD)
#define SCCL_PATH_NS path_avx2
#define SCCL_PATH_OPS Avx2Ops
#define SCCL_PATH_ENTRY SCCL_AVX2_TARGET
#define SCCL_PATH_INLINE SCCL_AVX2_INLINE
#define SCCL_PATH_DRIVERS kAvx2PathDrivers
#include "kernels/host/codec_path_drivers.inc"  // NOLINT: the path's file body
#endif
