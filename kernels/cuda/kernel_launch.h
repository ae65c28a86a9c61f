// SCCL_LAUNCH(grid, block, shared, stream, kernel)(args...): a kernel launch, `<<<>>>` under nvcc
// and the emulated runtime's launch where the .cu file is compiled as C++ (-Demulated_cuda=true,
// cudaemu/include/cudaemu/device.h). The kernel comes last, so a template's commas need no
// parentheses.
#pragma once

#if defined(CUDAEMU_DEVICE_H)
#define SCCL_LAUNCH(grid, block, shared, stream, ...) \
  CUDAEMU_LAUNCH(grid, block, shared, stream, __VA_ARGS__)
#else
#define SCCL_LAUNCH(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#endif
