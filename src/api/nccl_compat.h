// What nccl.h of a release older than 2.32 lacks and SketchCCL's table needs: the types of the
// functions NCCL added in 2.29-2.32, each guarded by NCCL_VERSION_CODE so that a newer nccl.h
// (which has them) wins. Layouts as NCCL's own header at the release that added them
// (docs/interposition.md); the function prototypes themselves come from nccl_api.h's rows.
#pragma once

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifndef NCCL_VERSION_CODE
#error "nccl.h defines no NCCL_VERSION_CODE"
#endif

#if NCCL_VERSION_CODE < 22902
// One signal to wait for (ncclWaitSignal), NCCL 2.29.2.
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;
#define NCCL_WIN_STRICT_ORDERING 0x01
#endif

#if NCCL_VERSION_CODE < 22907
// What ncclCommMemStats reports, NCCL 2.29.7.
typedef enum {
  ncclStatGpuMemSuspend = 0,    // GPU memory a suspend can release (bytes)
  ncclStatGpuMemSuspended = 1,  // 1 while suspended, else 0
  ncclStatGpuMemPersist = 2,    // GPU memory a suspend keeps (bytes)
  ncclStatGpuMemTotal = 3,      // all of the communicator's GPU memory (bytes)
} ncclCommMemStat_t;
#define NCCL_SUSPEND_MEM 0x01
#endif

#if NCCL_VERSION_CODE < 23004
// The parameter API's handle (NCCL 2.30.7's spelling; 2.30.4's differs in source, not in ABI).
struct ncclParamHandle;
typedef struct ncclParamHandle* ncclParamHandle_t;
#endif

#if NCCL_VERSION_CODE < 23102
// A vendor's option in a per-call config's `ext` list (NCCL ignores the list), NCCL 2.31.2.
typedef struct ncclConfigExt {
  struct ncclConfigExt* next;
  struct {
    int vendorId;
    int optionId;
  } key;
  union {
    int i;
    const char* s;
    void* raw;
  } val;
} ncclConfigExt_t;

// The per-collective config of the *Config calls, in NCCL 2.32.3's layout (2.31.2's is the same
// without launchCompletionEvent: a reader honours the caller's `size`).
typedef struct ncclCollConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs;
  int maxCTAs;
  int nvlsCTAs;
  int cgaClusterSize;
  const char* algSelection;
  int forceAlgSelection;
  int CTAPolicy;
  uint64_t userProfilerTag;
  cudaEvent_t launchCompletionEvent;
} ncclCollConfig_t;

#define NCCL_COLLCONFIG_INITIALIZER                                                      \
  {                                                                                      \
    sizeof(ncclCollConfig_t), 0xcafebeef, NCCL_VERSION(2, 32, 3), NCCL_CONFIG_UNDEF_PTR, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,             \
        NCCL_CONFIG_UNDEF_INT, NULL, 1, NCCL_CONFIG_UNDEF_INT, 0, NULL                   \
  }
#endif

#if NCCL_VERSION_CODE < 23203
// ncclSetEncryption's argument, NCCL 2.32: no header of it was at hand, so it is declared
// incomplete; SketchCCL only hands the caller's pointer on.
struct ncclEncryptionConfig;
typedef struct ncclEncryptionConfig ncclEncryptionConfig_t;
#endif
