// The GPU workers' CUDA_OK: a CUDA call that must succeed; on failure the rank prints a FAIL case
// (rank_report.h's format) and exits, as NCCL_OK does for NCCL calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_OK(call)                                                                 \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("CASE cuda HASH 0 FAIL %s -> %s\n", #call, cudaGetErrorString(e_)); \
      std::fflush(stdout);                                                            \
      std::exit(4);                                                                   \
    }                                                                                 \
  } while (0)
