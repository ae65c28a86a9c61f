// The generic CPU path's drivers: kernels/host/codec_paths.inc over cpu_ops_generic.h's GenericOps
// (flat loops the compiler vectorizes), for every CPU; its entry points are cloned for the
// baseline x86-64 and x86-64-v2 (kernels/host/codec_paths.h).
#include "kernels/host/codec_paths.h"
#include "kernels/host/cpu_ops_generic.h"

#define SCCL_PATH_NS path_generic
#define SCCL_PATH_OPS GenericOps
#define SCCL_PATH_ENTRY SCCL_GENERIC_PATH_CLONES
#define SCCL_PATH_INLINE SCCL_CPU_INLINE
#define SCCL_PATH_DRIVERS kGenericPathDrivers
#include "kernels/host/codec_path_drivers.inc"  // NOLINT: the path's file body
