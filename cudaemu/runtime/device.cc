// The one emulated device: an H100-like sm_90 (132 SMs, 80 GiB), its attributes, limits,
// versions, and kernel loading (lazy, as CUDA 12.2+ loads modules by default).
#include <cstdlib>
#include <cstring>
#include <set>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {

// CUDA_VISIBLE_DEVICES="" or "-1" hides the device, as with a real driver.
bool device_hidden() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v != nullptr && (*v == '\0' || std::strcmp(v, "-1") == 0);
}

std::mutex g_limit_mu;
size_t g_stack = 1024, g_printf_fifo = 1 << 20, g_heap = 8 << 20, g_l2_fetch = 32;

std::mutex g_load_mu;
std::set<const void*>& g_loaded = *new std::set<const void*>;

}  // namespace

void load_function(const void* fn, const char* name) {
  // CUDA_MODULE_LOADING=EAGER loads every module at start: nothing happens at first use.
  const char* mode = std::getenv("CUDA_MODULE_LOADING");
  if (mode != nullptr && std::strcmp(mode, "EAGER") == 0) return;
  {
    std::lock_guard<std::mutex> lock(g_load_mu);
    if (!g_loaded.insert(fn).second) return;
  }
  // A lazy module load synchronizes the context: it waits for all queued work.
  std::string call = std::string("first load of kernel ") + (name != nullptr ? name : "?");
  hazard_device_sync_call(call.c_str());
  hazard_lock_call(call.c_str());
  device_sync();
}

}  // namespace cudaemu

using namespace cudaemu;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  releaser_check("cudaGetDeviceCount");
  if (count == nullptr) return ret(cudaErrorInvalidValue);
  if (device_hidden()) {
    *count = 0;
    return ret(cudaErrorNoDevice);
  }
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (device == nullptr) return ret(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device_hidden()) return ret(cudaErrorNoDevice);
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  return device == 0 ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (p == nullptr) return ret(cudaErrorInvalidValue);
  if (device != 0) return ret(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::strncpy(p->name, "cudaemu (emulated H100-like sm_90)", sizeof p->name - 1);
  p->totalGlobalMem = size_t(80) << 30;
  p->sharedMemPerBlock = 48 << 10;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = size_t(2147483647);
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 << 10;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->multiProcessorCount = 132;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->sharedMemPerMultiprocessor = 228 << 10;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = 227 << 10;
  p->maxBlocksPerMultiProcessor = 32;
  p->reservedSharedMemPerBlock = 1 << 10;
  p->hostRegisterSupported = 1;
  p->hostRegisterReadOnlySupported = 1;
  p->memoryPoolsSupported = 1;
  p->memoryPoolSupportedHandleTypes = cudaMemHandleTypeNone;
  p->clusterLaunch = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (value == nullptr) return ret(cudaErrorInvalidValue);
  if (device != 0) return ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrStreamPrioritiesSupported:
    case cudaDevAttrCanUseHostPointerForRegisteredMem:
    case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrCooperativeLaunch:
      *value = 1;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
    case cudaDevAttrIntegrated:
    case cudaDevAttrPageableMemoryAccess:
    case cudaDevAttrConcurrentManagedAccess:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = 48 << 10;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = 227 << 10;
      return cudaSuccess;
    case cudaDevAttrMaxGridDimX:
      *value = 2147483647;
      return cudaSuccess;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ:
      *value = 65535;
      return cudaSuccess;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrMaxBlockDimZ:
      *value = 64;
      return cudaSuccess;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      *value = cudaMemHandleTypeNone;
      return cudaSuccess;
    default:
      // Not modelled: an honest refusal rather than a made-up number.
      return ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  releaser_check("cudaRuntimeGetVersion");
  if (v == nullptr) return ret(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  releaser_check("cudaDriverGetVersion");
  if (v == nullptr) return ret(cudaErrorInvalidValue);
  *v = 13000;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (value == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_limit_mu);
  switch (limit) {
    case cudaLimitStackSize:
      *value = g_stack;
      return cudaSuccess;
    case cudaLimitPrintfFifoSize:
      *value = g_printf_fifo;
      return cudaSuccess;
    case cudaLimitMallocHeapSize:
      *value = g_heap;
      return cudaSuccess;
    case cudaLimitMaxL2FetchGranularity:
      *value = g_l2_fetch;
      return cudaSuccess;
    default:
      return ret(cudaErrorUnsupportedLimit);
  }
}

cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (limit == cudaLimitStackSize) {
    // Resizing local memory synchronizes the device.
    hazard_device_sync_call("cudaDeviceSetLimit(cudaLimitStackSize)");
    device_sync();
  }
  std::lock_guard<std::mutex> lock(g_limit_mu);
  switch (limit) {
    case cudaLimitStackSize:
      g_stack = (value + 15) & ~size_t(15);
      return cudaSuccess;
    case cudaLimitPrintfFifoSize:
      g_printf_fifo = value;
      return cudaSuccess;
    case cudaLimitMallocHeapSize:
      g_heap = value;
      return cudaSuccess;
    case cudaLimitMaxL2FetchGranularity:
      if (value > 128) return ret(cudaErrorInvalidValue);
      g_l2_fetch = value;
      return cudaSuccess;
    default:
      return ret(cudaErrorUnsupportedLimit);
  }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (attr == nullptr) return ret(cudaErrorInvalidValue);
  if (func == nullptr) return ret(cudaErrorInvalidDeviceFunction);
  load_function(func, nullptr);
  *attr = cudaFuncAttributes{};
  // Plausible sm_90 figures: the emulator cannot know the real register or stack use.
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->localSizeBytes = 0;
  attr->sharedSizeBytes = 0;
  attr->constSizeBytes = 0;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = 48 << 10;
  return ret(sticky_error());
}

}  // extern "C"
