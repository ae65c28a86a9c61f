// CUDA's virtual memory management, as ncclMemAlloc uses it: physical allocations (cuMemCreate,
// a memfd filled with poison), address reservations in the device region (cuMemAddressReserve),
// mappings (cuMemMap: the memfd's pages at the reserved address) and the device's access to them
// (cuMemSetAccess; until then a device access is a fault and the pages stay PROT_NONE).
#include <cuda.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "cudaemu/runtime/state.h"

using namespace cudaemu;

namespace {

constexpr std::size_t kGranularity = std::size_t(2) << 20;  // minimum and recommended: 2 MiB

struct Handle {
  std::size_t size = 0;
  int fd = -1;
  CUmemAllocationProp prop{};
  int refs = 1;  // cuMemCreate and each cuMemRetainAllocationHandle; cuMemRelease drops one
  int maps = 0;  // live mappings: the memory stays while one does, released or not
};

struct Mapping {
  std::size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
};

std::mutex g_mu;
// Never destroyed: a late call during exit() must not meet a dead container.
auto& g_handles = *new std::map<CUmemGenericAllocationHandle, Handle>;
auto& g_reserved = *new std::map<CUdeviceptr, std::size_t>;  // base -> size
auto& g_mapped = *new std::map<CUdeviceptr, Mapping>;        // va -> mapping
CUmemGenericAllocationHandle g_next_handle = 0x1000;

CUresult enter() {
  switch (api_enter()) {
    case cudaSuccess:
      return CUDA_SUCCESS;
    case cudaErrorNotPermitted:
      return CUDA_ERROR_NOT_PERMITTED;
    case cudaErrorNoDevice:
      return CUDA_ERROR_NO_DEVICE;
    case cudaErrorIllegalAddress:
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case cudaErrorMisalignedAddress:
      return CUDA_ERROR_MISALIGNED_ADDRESS;
    default:
      return CUDA_ERROR_UNKNOWN;
  }
}

// The properties the emulated device can give: pinned device memory on device 0.
CUresult check_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

// The handle's memory goes once it is released and unmapped everywhere; under g_mu.
void drop_if_unused(CUmemGenericAllocationHandle h) {
  auto it = g_handles.find(h);
  if (it == g_handles.end() || it->second.refs > 0 || it->second.maps > 0) return;
  close(it->second.fd);
  g_handles.erase(it);
}

// The reservation holding [va, va+size), or end(); under g_mu.
std::map<CUdeviceptr, std::size_t>::iterator reservation_of(CUdeviceptr va, std::size_t size) {
  auto it = g_reserved.upper_bound(va);
  if (it == g_reserved.begin()) return g_reserved.end();
  --it;
  if (va + size < va || va + size > it->first + it->second) return g_reserved.end();
  return it;
}

}  // namespace

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  r = check_prop(prop);
  if (r != CUDA_SUCCESS) return r;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  hazard_lock_call("cuMemCreate");
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  r = check_prop(prop);
  if (r != CUDA_SUCCESS) return r;
  // A multiple of the granularity (cuMemGetAllocationGranularity), as CUDA requires.
  if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  // No export: a handle type is accepted (none, POSIX fd) but cuMemExportToShareableHandle does
  // not exist here. Compression and GPUDirect RDMA (the device says it has none) are refused.
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (prop->allocFlags.compressionType != 0 || prop->allocFlags.gpuDirectRDMACapable != 0)
    return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = memfd_create("cudaemu-vmm", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Fresh device memory is poison, never zero.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memset(p, kPoisonByte, size);
  munmap(p, size);
  std::lock_guard<std::mutex> lock(g_mu);
  const CUmemGenericAllocationHandle h = g_next_handle++;
  Handle& x = g_handles[h];
  x.size = size;
  x.fd = fd;
  x.prop = *prop;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_handles.find(handle);
  if (it == g_handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  // Still mapped: the memory stays until the last cuMemUnmap (CUDA's documented behaviour).
  --it->second.refs;
  drop_if_unused(handle);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_handles.find(handle);
  if (it == g_handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto va = reinterpret_cast<CUdeviceptr>(addr);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_mapped.upper_bound(va);
  if (it == g_mapped.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (va >= it->first + it->second.size) return CUDA_ERROR_INVALID_VALUE;
  // A mapping keeps its handle's entry, released or not.
  auto h = g_handles.find(it->second.handle);
  if (h == g_handles.end()) return CUDA_ERROR_INVALID_VALUE;
  ++h->second.refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  (void)addr;  // a hint: CUDA need not honour it
  if (ptr == nullptr || flags != 0 || size == 0 || size % kGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kGranularity;
  if ((alignment & (alignment - 1)) != 0 || alignment % kGranularity != 0)
    return CUDA_ERROR_INVALID_VALUE;
  void* p = region_reserve_aligned(size, alignment);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mu);
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  g_reserved[*ptr] = size;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_reserved.find(ptr);
  if (it == g_reserved.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // Every mapping inside must be unmapped first.
  auto m = g_mapped.lower_bound(ptr);
  if (m != g_mapped.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  g_reserved.erase(it);
  // Not reused before the region is exhausted, so a stale pointer stays invalid.
  region_free(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ptr % kGranularity != 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  // Offsets into the allocation are not modelled: the whole allocation is mapped.
  if (offset != 0) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> lock(g_mu);
  auto h = g_handles.find(handle);
  if (h == g_handles.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (size > h->second.size) return CUDA_ERROR_INVALID_VALUE;
  if (reservation_of(ptr, size) == g_reserved.end()) return CUDA_ERROR_INVALID_VALUE;
  // Already mapped anywhere in [ptr, ptr+size): refused.
  auto m = g_mapped.upper_bound(ptr + size - 1);
  if (m != g_mapped.begin()) {
    --m;
    if (m->first + m->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!vmm_map_pages(reinterpret_cast<void*>(ptr), size, h->second.fd))
    return CUDA_ERROR_OUT_OF_MEMORY;
  ++h->second.maps;
  g_mapped[ptr] = Mapping{size, handle};
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  // Like cudaFree, unmapping waits for the device's work first (nothing may run in the range).
  hazard_device_sync_call("cuMemUnmap");
  hazard_lock_call("cuMemUnmap");
  device_sync();
  std::lock_guard<std::mutex> lock(g_mu);
  auto m = g_mapped.find(ptr);
  // One whole mapping at a time (ncclMemFree's use).
  if (m == g_mapped.end() || m->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  vmm_unmap_pages(reinterpret_cast<void*>(ptr), size);
  const CUmemGenericAllocationHandle h = m->second.handle;
  g_mapped.erase(m);
  auto x = g_handles.find(h);
  if (x != g_handles.end()) --x->second.maps;
  drop_if_unused(h);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  bool access = false;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
        access = true;
        break;
      case CU_MEM_ACCESS_FLAGS_PROT_NONE:
        access = false;
        break;
      case CU_MEM_ACCESS_FLAGS_PROT_READ:
        // Read-only device access is not modelled (a write would go unnoticed): refused.
        return CUDA_ERROR_NOT_SUPPORTED;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  // The range is whole mappings, back to back.
  CUdeviceptr at = ptr;
  while (at < ptr + size) {
    auto m = g_mapped.find(at);
    if (m == g_mapped.end() || at + m->second.size > ptr + size) return CUDA_ERROR_INVALID_VALUE;
    at += m->second.size;
  }
  for (at = ptr; at < ptr + size; at += g_mapped[at].size)
    vmm_set_access(reinterpret_cast<void*>(at), access);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
  Allocation a;
  if (!find_device_allocation(reinterpret_cast<const void*>(ptr), &a) || !a.vmm)
    return CUDA_ERROR_INVALID_VALUE;
  *flags = a.no_access ? CU_MEM_ACCESS_FLAGS_PROT_NONE : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Allocation a;
  const void* p = reinterpret_cast<const void*>(dptr);
  if (!in_device_region(p) || !find_device_allocation(p, &a)) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = a.base;
  if (size != nullptr) *size = a.size;
  return CUDA_SUCCESS;
}

}  // extern "C"
