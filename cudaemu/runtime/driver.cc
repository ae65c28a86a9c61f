// The driver entry points the project looks up through cudaGetDriverEntryPoint(ByVersion):
// stream memory operations, device and pointer attributes; real function pointers.
#include <cuda.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

using namespace cudaemu;

namespace {

CUresult to_cu(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return CUDA_SUCCESS;
    case cudaErrorInvalidValue:
      return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidResourceHandle:
      return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorInvalidDevice:
      return CUDA_ERROR_INVALID_DEVICE;
    case cudaErrorNotPermitted:
      return CUDA_ERROR_NOT_PERMITTED;
    case cudaErrorIllegalAddress:
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case cudaErrorMisalignedAddress:
      return CUDA_ERROR_MISALIGNED_ADDRESS;
    case cudaErrorLaunchFailure:
      return CUDA_ERROR_LAUNCH_FAILED;
    case cudaErrorStreamCaptureUnsupported:
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    case cudaErrorStreamCaptureImplicit:
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    case cudaErrorNoDevice:
      return CUDA_ERROR_NO_DEVICE;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

bool wait_satisfied(std::uint32_t v, std::uint32_t value, unsigned op) {
  switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<std::int32_t>(v - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return v == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (v & value) != 0;
    default:  // NOR
      return ~(v | value) != 0;
  }
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return to_cu(api_enter());
}

CUresult cuDriverGetVersion(int* v) {
  releaser_check("cuDriverGetVersion");
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  releaser_check("cuGetErrorString");
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *str = error == CUDA_SUCCESS ? "no error" : "emulated driver error";
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                             unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return to_cu(e);
  const unsigned op = flags & 0x3u;
  if ((flags & ~(0x3u | unsigned(CU_STREAM_WAIT_VALUE_FLUSH))) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* word = reinterpret_cast<const std::uint32_t*>(static_cast<std::uintptr_t>(addr));
  if ((addr & 3u) != 0 || !device_range_ok(word, 4)) return CUDA_ERROR_INVALID_VALUE;
  const bool on_host = !in_device_region(word);
  ItemPtr item;
  std::string what =
      std::string("cuStreamWaitValue32 on ") + (on_host ? "host" : "device") + " memory";
  e = submit(
      reinterpret_cast<cudaStream_t>(stream), what.c_str(),
      [word, value, op, on_host] {
        for (;;) {
          std::uint32_t v;
          if (on_host) {
            v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
          } else {
            if (device_access_denied(word, 4))
              device_fault(cudaErrorIllegalAddress,
                           "wait on a VMM mapping without device access (cuMemSetAccess)");
            DeviceAccess access;
            v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
          }
          if (wait_satisfied(v, value, op) || sticky_error() != cudaSuccess) break;
          // The queue is held by this wait, as the GPU's front end is.
          if (on_host) note_host_wait(current_item(), true);
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      },
      false, &item);
  if (e == cudaSuccess && on_host && item) {
    // Strict mode sees it as soon as it is queued (hazards.cc).
    item->host_condition = [word, value, op] {
      return wait_satisfied(__atomic_load_n(word, __ATOMIC_ACQUIRE), value, op);
    };
    note_queued_host_wait(item);
  }
  return to_cu(e);
}

CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                              unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return to_cu(e);
  if ((flags & ~unsigned(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* word = reinterpret_cast<std::uint32_t*>(static_cast<std::uintptr_t>(addr));
  if ((addr & 3u) != 0 || !device_range_ok(word, 4)) return CUDA_ERROR_INVALID_VALUE;
  e = submit(
      reinterpret_cast<cudaStream_t>(stream), "cuStreamWriteValue32",
      [word, value] {
        if (device_access_denied(word, 4))
          device_fault(cudaErrorIllegalAddress,
                       "write to a VMM mapping without device access (cuMemSetAccess)");
        __atomic_store_n(word, value, __ATOMIC_RELEASE);
      },
      true);
  return to_cu(e);
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice dev) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return to_cu(e);
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    // VMM memory without GPUDirect RDMA, handles without export (vmm.cc).
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      // The driver's numbering is the runtime's for the attributes both know.
      e = cudaDeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attr), 0);
      if (e != cudaSuccess) cudaGetLastError();
      return to_cu(e);
  }
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return to_cu(e);
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const void* p = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(ptr));
  Allocation a;
  HostRange h;
  const bool dev = in_device_region(p) && find_device_allocation(p, &a);
  const bool host = !dev && find_host_range(p, &h);
  // Memory the driver does not know.
  if (!dev && !host) return CUDA_ERROR_INVALID_VALUE;
  const std::uintptr_t base = dev ? a.base : h.base;
  const std::size_t size = dev ? a.size : h.size;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (dev) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = const_cast<void*>(p);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<bool*>(data) = true;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // extern "C"

namespace {

struct Entry {
  const char* name;
  void* fn;
};

const Entry kEntries[] = {
    {"cuInit", reinterpret_cast<void*>(&cuInit)},
    {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
    {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
    {"cuStreamWaitValue32", reinterpret_cast<void*>(&cuStreamWaitValue32)},
    {"cuStreamWriteValue32", reinterpret_cast<void*>(&cuStreamWriteValue32)},
    {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
    {"cuPointerGetAttribute", reinterpret_cast<void*>(&cuPointerGetAttribute)},
    // Virtual memory management (vmm.cc), as ncclMemAlloc / ncclMemFree use it.
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
    {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
    {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
    {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
    {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
    {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
    {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
    {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
    {"cuMemGetAccess", reinterpret_cast<void*>(&cuMemGetAccess)},
    {"cuMemGetAllocationPropertiesFromHandle",
     reinterpret_cast<void*>(&cuMemGetAllocationPropertiesFromHandle)},
    {"cuMemRetainAllocationHandle", reinterpret_cast<void*>(&cuMemRetainAllocationHandle)},
    {"cuMemGetAddressRange", reinterpret_cast<void*>(&cuMemGetAddressRange)},
};

cudaError_t lookup(const char* call, const char* symbol, void** fn, unsigned version,
                   unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  cudaError_t e = api_enter(call);
  if (e != cudaSuccess) return e;
  if (symbol == nullptr || fn == nullptr) return ret(cudaErrorInvalidValue);
  if (flags & ~static_cast<unsigned long long>(cudaEnableDefault | cudaEnableLegacyStream |
                                               cudaEnablePerThreadDefaultStream)) {
    return ret(cudaErrorInvalidValue);
  }
  *fn = nullptr;
  cudaDriverEntryPointQueryResult r = cudaDriverEntryPointSymbolNotFound;
  if (version > 13000) {
    r = cudaDriverEntryPointVersionNotSufficent;
  } else {
    for (const Entry& x : kEntries) {
      if (std::strcmp(x.name, symbol) == 0) {
        *fn = x.fn;
        r = cudaDriverEntryPointSuccess;
      }
    }
  }
  if (status != nullptr) *status = r;
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  return lookup("cudaGetDriverEntryPointByVersion", symbol, fn, version, flags, status);
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status) {
  return lookup("cudaGetDriverEntryPoint", symbol, fn, 12000, flags, status);
}

}  // extern "C"
