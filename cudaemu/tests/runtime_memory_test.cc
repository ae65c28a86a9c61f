// The emulated runtime's memory: bounds, pointer attributes, pageable vs pinned copies, pools
// with poison and reuse, cudaFree as a device synchronization, host dereference of device memory.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cudaemu/tests/selftest_util.h"

using namespace cudaemu_test;

namespace {

TEST(cudaemu, CopiesAreBoundsChecked) {
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 1000));
  std::vector<char> h(2000);
  CUDA_OK(cudaMemcpy(d, h.data(), 1000, cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaMemcpy(d, h.data(), 1001, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h.data(), static_cast<char*>(d) + 1, 1000, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  // A host pointer where the kind says device, and the reverse.
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 1000, 10, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, d, 10, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(h.data(), 0, 10), cudaErrorInvalidValue);
  cudaGetLastError();
  CUDA_OK(cudaFree(d));
  EXPECT_EQ(cudaMemset(d, 0, 10), cudaErrorInvalidValue);  // freed
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST(cudaemu, FreeingAnAllocationLeavesItsNeighboursIntact) {
  // Small allocations share pages: giving one back must not touch the others.
  std::vector<void*> d(16);
  for (auto& p : d)
    CUDA_OK(cudaMalloc(&p, 512));
  for (auto& p : d)
    CUDA_OK(cudaMemset(p, 0x5A, 512));
  for (size_t i = 0; i < d.size(); i += 2)
    CUDA_OK(cudaFree(d[i]));
  std::vector<unsigned char> h(512);
  for (size_t i = 1; i < d.size(); i += 2) {
    CUDA_OK(cudaMemcpy(h.data(), d[i], h.size(), cudaMemcpyDeviceToHost));
    for (unsigned char c : h)
      ASSERT_EQ(c, 0x5A) << "allocation " << i;
    CUDA_OK(cudaFree(d[i]));
  }
}

TEST(cudaemu, FreshDeviceMemoryIsPoisonNotZero) {
  float* d = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), 64));
  float h[16];
  CUDA_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(std::isnan(h[0]));
  CUDA_OK(cudaFree(d));
}

TEST(cudaemu, PointerAttributes) {
  void* d = nullptr;
  void* pinned = nullptr;
  CUDA_OK(cudaMalloc(&d, 256));
  CUDA_OK(cudaHostAlloc(&pinned, 256, cudaHostAllocPortable));
  std::vector<char> reg(8192);
  CUDA_OK(cudaHostRegister(reg.data(), reg.size(), cudaHostRegisterMapped));
  EXPECT_EQ(cudaHostRegister(reg.data() + 100, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
  cudaGetLastError();
  cudaPointerAttributes a{};
  CUDA_OK(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 10));
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  CUDA_OK(cudaPointerGetAttributes(&a, pinned));
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  CUDA_OK(cudaPointerGetAttributes(&a, reg.data() + 5));
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  int pageable = 0;
  CUDA_OK(cudaPointerGetAttributes(&a, &pageable));
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  void* dev = nullptr;
  CUDA_OK(cudaHostGetDevicePointer(&dev, reg.data(), 0));
  EXPECT_EQ(dev, reg.data());
  EXPECT_EQ(cudaHostGetDevicePointer(&dev, &pageable, 0), cudaErrorInvalidValue);
  cudaGetLastError();
  // The driver's view, through the entry point.
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CUDA_OK(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000, 0, &q));
  auto get = reinterpret_cast<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>(fn);
  unsigned type = 0;
  EXPECT_EQ(get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(d)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(&pageable)),
            CUDA_ERROR_INVALID_VALUE);
  CUDA_OK(cudaHostUnregister(reg.data()));
  EXPECT_EQ(cudaHostUnregister(reg.data()), cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(d));
}

TEST(cudaemu, PageableCopyBlocksTheCallerPinnedDoesNot) {
  Words f;
  cudaStream_t s = stream_off({});
  int* d = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)));
  CUDA_OK(cudaMemset(d, 0x01, sizeof(int)));
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(wait_value()(s, f.dev(0), 1, 0), CUDA_SUCCESS);
  // Pinned destination: queued behind the held head, the call returns at once.
  int* pinned = nullptr;
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(int)));
  *pinned = 7;
  CUDA_OK(cudaMemcpyAsync(pinned, d, sizeof(int), cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(*pinned, 7);
  // Pageable destination: the call returns only once the copy is done.
  int pageable = 7;
  std::atomic<bool> returned{false};
  std::thread t([&] {
    cudaMemcpyAsync(&pageable, d, sizeof(int), cudaMemcpyDeviceToHost, s);
    returned = true;
  });
  EXPECT_TRUE(stays_false([&] { return returned.load(); }));
  f.set(0, 1);
  t.join();
  EXPECT_EQ(pageable, 0x01010101);
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(*pinned, 0x01010101);
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFree(d));
  cudaStreamDestroy(s);
}

TEST(cudaemu, CudaFreeWaitsForAllQueuedWork) {
  Words f;
  cudaStream_t s = stream_off({});
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 64));
  ASSERT_EQ(wait_value()(s, f.dev(0), 1, 0), CUDA_SUCCESS);
  std::atomic<bool> returned{false};
  std::thread t([&] {
    cudaFree(d);  // not even using the held stream
    returned = true;
  });
  EXPECT_TRUE(stays_false([&] { return returned.load(); }));
  f.set(0, 1);
  t.join();
  cudaStreamDestroy(s);
}

TEST(cudaemu, PoolReusesInStreamOrderAndPoisonsFreedMemory) {
  cudaMemPool_t pool = nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CUDA_OK(cudaMemPoolCreate(&pool, &props));
  uint64_t keep = 1 << 30;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  cudaStream_t s = stream_off({});
  cudaStream_t t = stream_off({s});
  uint32_t* p = nullptr;
  CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&p), 4096, pool, s));
  CUDA_OK(cudaMemsetAsync(p, 0x11, 4096, s));
  CUDA_OK(cudaFreeAsync(p, s));
  // Same stream: reused at once, and the free's poison is what it holds.
  uint32_t* q = nullptr;
  CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&q), 4096, pool, s));
  EXPECT_EQ(q, p);
  uint32_t h = 0;
  CUDA_OK(cudaMemcpyAsync(&h, q, 4, cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(h, 0xFFFFFFFFu);
  // Another stream while the free has not run: no reuse without internal dependencies.
  Words f;
  ASSERT_EQ(wait_value()(s, f.dev(0), 1, 0), CUDA_SUCCESS);
  CUDA_OK(cudaFreeAsync(q, s));
  int off = 0;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
  uint32_t* r = nullptr;
  CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&r), 4096, pool, t));
  EXPECT_NE(r, q);
  CUDA_OK(cudaFreeAsync(r, t));
  CUDA_OK(cudaStreamSynchronize(t));
  // With internal dependencies: reused, and t now waits for s's free.
  int on = 1;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &on));
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off));
  uint32_t* u = nullptr;
  CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&u), 4096, pool, t));
  EXPECT_EQ(u, q);
  ASSERT_EQ(write_value()(t, f.dev(1), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(1) != 0; }, 100));
  f.set(0, 1);
  CUDA_OK(cudaStreamSynchronize(t));
  EXPECT_EQ(f.get(1), 1u);
  CUDA_OK(cudaFreeAsync(u, t));
  CUDA_OK(cudaStreamSynchronize(t));
  CUDA_OK(cudaStreamSynchronize(s));
  // Release threshold 0: a synchronization gives the free memory back.
  uint64_t zero = 0, reserved = 1;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero));
  CUDA_OK(cudaStreamSynchronize(t));
  CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  EXPECT_EQ(reserved, 0u);
  EXPECT_EQ(cudaFreeAsync(&h, s), cudaErrorInvalidValue);
  // A double free, while the first is still queued behind a held stream.
  Words g;
  uint32_t* v = nullptr;
  CUDA_OK(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&v), 256, pool, s));
  ASSERT_EQ(wait_value()(s, g.dev(0), 1, 0), CUDA_SUCCESS);
  CUDA_OK(cudaFreeAsync(v, s));
  EXPECT_EQ(cudaFreeAsync(v, t), cudaErrorInvalidValue);
  g.set(0, 1);
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGetLastError();
  CUDA_OK(cudaMemPoolDestroy(pool));
  cudaStreamDestroy(s);
  cudaStreamDestroy(t);
}

TEST(cudaemuDeathTest, HostDereferenceOfDeviceMemoryDies) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_DEATH(
      {
        int* d = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&d), 64);
        volatile int x = d[3];
        (void)x;
      },
      "host code touched device memory at 0x[0-9a-f]+ \\(allocation 0x[0-9a-f]+\\+12, size 64\\)");
}

TEST(cudaemuDeathTest, DeviceFaultIsSticky) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        void* d = nullptr;
        cudaMalloc(&d, 64);
        cudaemu::enqueue(nullptr, "kernel k_bad", [] {
          cudaemu::device_fault(cudaErrorIllegalAddress, "read of 0x10 outside any allocation");
        });
        const bool synced = cudaDeviceSynchronize() == cudaErrorIllegalAddress;
        void* e = nullptr;
        const bool later = cudaMalloc(&e, 64) == cudaErrorIllegalAddress &&
                           cudaGetLastError() == cudaErrorIllegalAddress &&
                           cudaGetLastError() == cudaErrorIllegalAddress;
        std::exit(synced && later ? 0 : 1);
      },
      testing::ExitedWithCode(0), "device fault \\(cudaErrorIllegalAddress\\) in kernel k_bad");
}

}  // namespace
