// Device allocations, page-locked host memory and pointer attributes.
#include <cstdlib>
#include <cstring>

#include "cudaemu/runtime/state.h"

using namespace cudaemu;

namespace cudaemu {

// A fresh device allocation: registered, filled with poison (device memory is never zeroed).
void* new_device_allocation(std::size_t size, Pool* pool) {
  void* p = region_alloc(size);
  if (p == nullptr) return nullptr;
  Allocation a;
  a.base = reinterpret_cast<std::uintptr_t>(p);
  a.size = size;
  a.block = size;
  a.pool = pool;
  {
    DeviceAccess access;
    std::memset(p, kPoisonByte, size);
  }
  add_device_allocation(a);
  return p;
}

}  // namespace cudaemu

extern "C" {

cudaError_t cudaMalloc(void** p, size_t size) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (p == nullptr) return ret(cudaErrorInvalidValue);
  e = capture_unsafe_call("cudaMalloc");
  if (e != cudaSuccess) return ret(e);
  hazard_lock_call("cudaMalloc");
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  *p = new_device_allocation(size, nullptr);
  return *p == nullptr ? ret(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (p == nullptr) return cudaSuccess;
  e = capture_unsafe_call("cudaFree");
  if (e != cudaSuccess) return ret(e);
  hazard_device_sync_call("cudaFree");
  hazard_lock_call("cudaFree");
  Allocation a;
  // A cuMemMap mapping is not cudaMalloc's: cuMemUnmap ends it.
  if (!find_device_allocation(p, &a) || a.base != reinterpret_cast<std::uintptr_t>(p) ||
      a.free_queued || a.vmm) {
    return ret(cudaErrorInvalidValue);
  }
  // cudaFree synchronizes the device: every queued item of every stream finishes first.
  device_sync();
  if (!take_device_allocation(p, &a)) return ret(cudaErrorInvalidValue);
  if (a.pool != nullptr) {
    pool_forget(a);
  } else {
    region_free(p, a.block);
  }
  return ret(sticky_error());
}

cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  constexpr unsigned kFlags =
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (p == nullptr || (flags & ~kFlags) != 0) return ret(cudaErrorInvalidValue);
  e = capture_unsafe_call("cudaHostAlloc");
  if (e != cudaSuccess) return ret(e);
  hazard_lock_call("cudaHostAlloc");
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size) != 0) return ret(cudaErrorMemoryAllocation);
  HostRange r;
  r.base = reinterpret_cast<std::uintptr_t>(mem);
  r.size = size;
  r.kind = HostKind::kAllocated;
  r.flags = flags;
  add_host_range(r);
  *p = mem;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  return cudaHostAlloc(p, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* p) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (p == nullptr) return cudaSuccess;
  e = capture_unsafe_call("cudaFreeHost");
  if (e != cudaSuccess) return ret(e);
  hazard_device_sync_call("cudaFreeHost");
  hazard_lock_call("cudaFreeHost");
  HostRange r;
  if (!find_host_range(p, &r) || r.base != reinterpret_cast<std::uintptr_t>(p) ||
      r.kind != HostKind::kAllocated) {
    return ret(cudaErrorInvalidValue);
  }
  // Like cudaFree, it waits for the device first.
  device_sync();
  if (!take_host_range(p, HostKind::kAllocated, &r)) return ret(cudaErrorInvalidValue);
  std::free(p);
  return ret(sticky_error());
}

cudaError_t cudaHostRegister(void* p, size_t size, unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  constexpr unsigned kFlags = cudaHostRegisterPortable | cudaHostRegisterMapped |
                              cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
  if (p == nullptr || size == 0 || (flags & ~kFlags) != 0 || in_device_region(p)) {
    return ret(cudaErrorInvalidValue);
  }
  e = capture_unsafe_call("cudaHostRegister");
  if (e != cudaSuccess) return ret(e);
  hazard_lock_call("cudaHostRegister");
  HostRange r;
  r.base = reinterpret_cast<std::uintptr_t>(p);
  r.size = size;
  r.kind = HostKind::kRegistered;
  r.flags = flags;
  return ret(add_host_range(r));
}

cudaError_t cudaHostUnregister(void* p) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  e = capture_unsafe_call("cudaHostUnregister");
  if (e != cudaSuccess) return ret(e);
  hazard_lock_call("cudaHostUnregister");
  HostRange r;
  if (!take_host_range(p, HostKind::kRegistered, &r)) {
    return ret(cudaErrorHostMemoryNotRegistered);
  }
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned int flags) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  HostRange r;
  if (dev == nullptr || flags != 0 || !find_host_range(host, &r)) {
    return ret(cudaErrorInvalidValue);
  }
  // Unified addressing: the device sees page-locked memory at its host address.
  *dev = host;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (attr == nullptr) return ret(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{};
  Allocation a;
  HostRange h;
  if (in_device_region(p) && find_device_allocation(p, &a)) {
    attr->type = cudaMemoryTypeDevice;
    attr->device = 0;
    attr->devicePointer = const_cast<void*>(p);
    attr->hostPointer = nullptr;
  } else if (find_host_range(p, &h)) {
    attr->type = cudaMemoryTypeHost;
    attr->device = 0;
    attr->devicePointer = const_cast<void*>(p);
    attr->hostPointer = const_cast<void*>(p);
  } else {
    // Memory CUDA does not know (since CUDA 11 a success, not an error).
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  cudaError_t e = api_enter();
  if (e != cudaSuccess) return e;
  if (free_bytes == nullptr || total == nullptr) return ret(cudaErrorInvalidValue);
  *total = size_t(80) << 30;
  *free_bytes = size_t(79) << 30;
  return cudaSuccess;
}

}  // extern "C"
