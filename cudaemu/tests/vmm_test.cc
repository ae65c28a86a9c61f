// Virtual memory management as ncclMemAlloc / ncclMemFree use it: granularity, cuMemCreate,
// cuMemAddressReserve, cuMemMap, cuMemSetAccess; the mapping is device memory (pointer
// attributes, copies, kernels); refused sizes; device access before cuMemSetAccess is a fault;
// release while mapped keeps the memory until cuMemUnmap.
#include "cudaemu/device.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kGran = size_t(2) << 20;

__global__ void k_add_one(int* p, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) {
    cudaemu::dev::check_access(p + i, sizeof(int), sizeof(int));
    p[i] += 1;
  }
}

// A plain store, not through check_access: only the page protection sees it.
__global__ void k_plain_store(int* p) {
  p[0] = 1;
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

CUmemAccessDesc rw_access() {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = 0;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// ncclMemAlloc's sequence, with or without the final cuMemSetAccess; false on any failure.
bool vmm_alloc(size_t size, bool access, CUdeviceptr* ptr, CUmemGenericAllocationHandle* h) {
  const CUmemAllocationProp prop = device_prop();
  size_t gran = 0;
  if (cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
      CUDA_SUCCESS)
    return false;
  size = (size + gran - 1) / gran * gran;
  if (cuMemCreate(h, size, &prop, 0) != CUDA_SUCCESS) return false;
  if (cuMemAddressReserve(ptr, size, gran, 0, 0) != CUDA_SUCCESS) return false;
  if (cuMemMap(*ptr, size, 0, *h, 0) != CUDA_SUCCESS) return false;
  if (!access) return true;
  const CUmemAccessDesc d = rw_access();
  return cuMemSetAccess(*ptr, size, &d, 1) == CUDA_SUCCESS;
}

TEST(cudaemuVmm, EveryEntryPointIsFoundByName) {
  for (const char* name :
       {"cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease", "cuMemAddressReserve",
        "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemGetAccess",
        "cuMemGetAllocationPropertiesFromHandle", "cuMemRetainAllocationHandle",
        "cuMemGetAddressRange"}) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    ASSERT_EQ(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q),
              cudaSuccess);
    EXPECT_EQ(q, cudaDriverEntryPointSuccess) << name;
    EXPECT_NE(fn, nullptr) << name;
  }
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 13000, cudaEnableDefault, &q),
            cudaSuccess);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuMemCreate));
  int vmm = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(vmm, 1);
  int rdma = 1;
  EXPECT_EQ(cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                 0),
            CUDA_SUCCESS);
  EXPECT_EQ(rdma, 0);
}

TEST(cudaemuVmm, NcclMemAllocSequenceGivesDeviceMemory) {
  const CUmemAllocationProp prop = device_prop();
  size_t min = 0, rec = 0;
  ASSERT_EQ(cuMemGetAllocationGranularity(&min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            CUDA_SUCCESS);
  EXPECT_EQ(min, kGran);
  EXPECT_EQ(rec, kGran);
  CUdeviceptr ptr = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_TRUE(vmm_alloc(3 << 20, true, &ptr, &h));  // rounded up to 4 MiB
  const size_t size = 2 * kGran;
  EXPECT_EQ(ptr % kGran, 0u);
  CUmemAllocationProp got{};
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS);
  EXPECT_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  unsigned long long flags = 0;
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_EQ(cuMemGetAccess(&flags, &loc, ptr + 100), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));

  // Device memory to the runtime and the driver.
  void* p = reinterpret_cast<void*>(ptr);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(p) + kGran + 8), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr + 4), CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CUdeviceptr base = 0;
  size_t range = 0;
  ASSERT_EQ(cuMemGetAddressRange(&base, &range, ptr + 12345), CUDA_SUCCESS);
  EXPECT_EQ(base, ptr);
  EXPECT_EQ(range, size);

  // Fresh memory is poison; a copy in, a kernel, a copy out.
  const int n = static_cast<int>(size / sizeof(int));
  std::vector<int> host(n);
  ASSERT_EQ(cudaMemcpy(host.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host[0], -1);
  EXPECT_EQ(host[n - 1], -1);
  for (int i = 0; i < n; ++i)
    host[i] = i;
  ASSERT_EQ(cudaMemcpy(p, host.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  CUDAEMU_LAUNCH((n + 255) / 256, 256, 0, nullptr, k_add_one)(static_cast<int*>(p), n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; i += 4099)
    ASSERT_EQ(back[i], i + 1) << i;
  EXPECT_EQ(back[n - 1], n);
  // Not cudaMalloc's: cudaFree refuses it.
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  cudaGetLastError();

  // ncclMemFree: retain, release, then release while mapped; the memory stays until unmapped.
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(cuMemRetainAllocationHandle(&again, static_cast<char*>(p) + 64), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  ASSERT_EQ(cuMemRelease(again), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  CUDAEMU_LAUNCH((n + 255) / 256, 256, 0, nullptr, k_add_one)(static_cast<int*>(p), n);
  ASSERT_EQ(cudaMemcpy(back.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[7], 9);
  EXPECT_EQ(back[n - 1], n + 1);
  // The released allocation is still there behind the mapping: retained again, as it was.
  ASSERT_EQ(cuMemRetainAllocationHandle(&again, p), CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  ASSERT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, again), CUDA_SUCCESS);
  EXPECT_EQ(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);
  ASSERT_EQ(cuMemRelease(again), CUDA_SUCCESS);
  // The reservation cannot go while mapped.
  EXPECT_EQ(cuMemAddressFree(ptr, size), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(ptr, size), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(ptr, size), CUDA_ERROR_INVALID_VALUE);
  // Unmapped: no longer memory CUDA knows; the handle is gone with it.
  ASSERT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaMemcpy(back.data(), p, 64, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT_EQ(cuMemRetainAllocationHandle(&again, p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(ptr, size, 0, h, 0), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuMemAddressFree(ptr, size), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(ptr, size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(cudaemuVmm, BadSizesAndPropertiesAreRefused) {
  CUmemAllocationProp prop = device_prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, kGran / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, kGran + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.location.id = 1;
  EXPECT_EQ(cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  prop = device_prop();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  prop = device_prop();
  prop.allocFlags.gpuDirectRDMACapable = 1;  // the device says it has no GPUDirect RDMA
  EXPECT_EQ(cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  prop = device_prop();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  ASSERT_EQ(cuMemCreate(&h, kGran, &prop, 0), CUDA_SUCCESS);

  CUdeviceptr va = 0;
  EXPECT_EQ(cuMemAddressReserve(&va, kGran + 512, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAddressReserve(&va, kGran, 3 << 20, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * kGran, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(va % kGran, 0u);
  // Size beyond the allocation, misaligned address or size, an offset, outside the reservation.
  EXPECT_EQ(cuMemMap(va, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va + 4096, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va, kGran - 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemMap(va, kGran, kGran, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemMap(va + 4 * kGran, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va + kGran, kGran, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va + kGran, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  // Access over a range that is not whole mappings, for another device, read-only.
  CUmemAccessDesc d = rw_access();
  EXPECT_EQ(cuMemSetAccess(va, 2 * kGran, &d, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemSetAccess(va + kGran, kGran / 2, &d, 1), CUDA_ERROR_INVALID_VALUE);
  d.location.id = 1;
  EXPECT_EQ(cuMemSetAccess(va + kGran, kGran, &d, 1), CUDA_ERROR_INVALID_DEVICE);
  d = rw_access();
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  EXPECT_EQ(cuMemSetAccess(va + kGran, kGran, &d, 1), CUDA_ERROR_NOT_SUPPORTED);
  // A copy into the reserved but unmapped part is refused at the call.
  std::vector<char> host(64);
  EXPECT_EQ(cudaMemcpy(reinterpret_cast<void*>(va), host.data(), 64, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  cudaGetLastError();
  EXPECT_EQ(cuMemUnmap(va + kGran, kGran / 2), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemUnmap(va + kGran, kGran), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, kGran), CUDA_ERROR_INVALID_VALUE);  // not the reserved size
  ASSERT_EQ(cuMemAddressFree(va, 4 * kGran), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&prop, h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A fault is sticky for the process (as on a GPU): each runs in a fresh child.
template <class F>
void expect_fault_in_child(F f, const char* what) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        f();
        const cudaError_t e = cudaDeviceSynchronize();
        std::fprintf(stderr, "SYNC=%s\n", cudaGetErrorName(e));
        std::exit(e == cudaErrorIllegalAddress ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), what);
}

TEST(cudaemuVmmDeathTest, ACopyBeforeSetAccessIsADeviceFault) {
  expect_fault_in_child(
      [] {
        CUdeviceptr ptr = 0;
        CUmemGenericAllocationHandle h = 0;
        if (!vmm_alloc(kGran, false, &ptr, &h)) std::exit(2);
        static int word = 5;
        // Accepted at the call (a mapped range); faults when the copy engine touches it.
        if (cudaMemcpyAsync(reinterpret_cast<void*>(ptr), &word, sizeof word,
                            cudaMemcpyHostToDevice, nullptr) != cudaSuccess)
          std::exit(3);
      },
      "device fault \\(cudaErrorIllegalAddress\\) in memcpy H2D.*VMM mapping without device "
      "access");
}

TEST(cudaemuVmmDeathTest, AKernelAccessBeforeSetAccessIsADeviceFault) {
  expect_fault_in_child(
      [] {
        CUdeviceptr ptr = 0;
        CUmemGenericAllocationHandle h = 0;
        if (!vmm_alloc(kGran, false, &ptr, &h)) std::exit(2);
        CUDAEMU_LAUNCH(1, 32, 0, nullptr, k_add_one)(reinterpret_cast<int*>(ptr), 32);
      },
      "device fault \\(cudaErrorIllegalAddress\\) in kernel k_add_one.*VMM mapping without "
      "device access");
}

TEST(cudaemuVmmDeathTest, AnUncheckedKernelStoreBeforeSetAccessDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CUdeviceptr ptr = 0;
        CUmemGenericAllocationHandle h = 0;
        if (!vmm_alloc(kGran, false, &ptr, &h)) std::exit(2);
        CUDAEMU_LAUNCH(1, 1, 0, nullptr, k_plain_store)(reinterpret_cast<int*>(ptr));
        cudaDeviceSynchronize();
      },
      "device work touched device memory at 0x[0-9a-f]+ \\(VMM mapping 0x[0-9a-f]+\\+0, size "
      "2097152\\) before cuMemSetAccess");
}

TEST(cudaemuVmmDeathTest, HostDereferenceOfAMappingDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        CUdeviceptr ptr = 0;
        CUmemGenericAllocationHandle h = 0;
        if (!vmm_alloc(kGran, true, &ptr, &h)) std::exit(2);
        volatile int x = reinterpret_cast<int*>(ptr)[3];
        (void)x;
      },
      "host code touched device memory at 0x[0-9a-f]+ \\(allocation 0x[0-9a-f]+\\+12, size "
      "2097152\\)");
}

}  // namespace
