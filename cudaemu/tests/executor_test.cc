// The kernel executor against CUDA's documented semantics: barriers, lock-step warp collectives,
// atomics across blocks, dynamic shared memory, and the faults a GPU reports (a lane missing from
// a collective, a misaligned or stray access, a launch shape CUDA refuses), on the real runtime.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cudaemu/device.h"

namespace {

// ---- kernels
// -------------------------------------------------------------------------------------
__global__ void k_tree_sum(const double* x, double* out) {
  __shared__ double part[256];
  const unsigned t = threadIdx.x;
  part[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned s = 128; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = part[0];
}

// out[6 * i + k]: xor 1, xor 16, up 3, down 5, idx 7, xor 2 within width 8.
__global__ void k_shuffles(int* out) {
  const int v = int(threadIdx.x) * 10;
  int* o = out + 6 * threadIdx.x;
  o[0] = __shfl_xor_sync(0xffffffffu, v, 1);
  o[1] = __shfl_xor_sync(0xffffffffu, v, 16);
  o[2] = __shfl_up_sync(0xffffffffu, v, 3);
  o[3] = __shfl_down_sync(0xffffffffu, v, 5);
  o[4] = __shfl_sync(0xffffffffu, v, 7);
  o[5] = __shfl_xor_sync(0xffffffffu, v, 2, 8);
}

// Lanes 0-15 and 16-31 shuffle in two groups with their own masks, in different code paths.
__global__ void k_half_masks(int* out) {
  const unsigned lane = threadIdx.x % 32;
  if (lane < 16) {
    out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, int(lane), 1, 16);
  } else {
    __syncwarp(0xffff0000u);
    out[threadIdx.x] = __shfl_xor_sync(0xffff0000u, int(lane), 4);
  }
}

__global__ void k_votes(unsigned* out) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned w = threadIdx.x / 32;
  const unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
  const int any = __any_sync(0xffffffffu, lane == 31 && w == 1);
  const int all = __all_sync(0xffffffffu, lane < 40);
  const int none = __any_sync(0xffffffffu, 0);
  if (lane == 0) {
    out[4 * w + 0] = b;
    out[4 * w + 1] = unsigned(any);
    out[4 * w + 2] = unsigned(all);
    out[4 * w + 3] = unsigned(none);
  }
}

__global__ void k_atomics(int* i, unsigned long long* u, float* f, double* d, unsigned* mx,
                          unsigned* mn, unsigned long long* bits) {
  const unsigned g = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(i, 1);
  atomicAdd(u, 3ull);
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicMax(mx, g);
  atomicMin(mn, g + 7);
  atomicOr(bits + (g % 4), 1ull << (g % 64));
}

// Half the block exits first; __syncthreads counts exited threads as arrived.
__global__ void k_sync_count(int* out) {
  if (threadIdx.x % 2) return;
  const int c = __syncthreads_count(threadIdx.x < 64);
  const int o = __syncthreads_or(threadIdx.x == 126);
  const int a = __syncthreads_and(threadIdx.x < 1000);
  if (threadIdx.x == 0) {
    out[0] = c;
    out[1] = o;
    out[2] = a;
  }
}

__global__ void k_dynamic_reverse(int* x) {
  int* buf = static_cast<int*>(cudaemu::dev::dynamic_shared());
  const unsigned t = threadIdx.x;
  buf[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  x[blockIdx.x * blockDim.x + t] = buf[blockDim.x - 1 - t];
}

// Lane 31 leaves; the others wait in a full-mask shuffle forever on a GPU.
__global__ void k_missing_lane(int* out) {
  if (threadIdx.x % 32 == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

// Warp 0 waits at a barrier, warp 1 in a shuffle that thread 32 never joins.
__global__ void k_barrier_vs_warp(int* out) {
  if (threadIdx.x < 32 || threadIdx.x == 32) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
  }
}

// A 16-byte load through the checked path the codecs' group helpers use.
__global__ void k_load16(const char* p, float* out) {
  cudaemu::dev::check_access(p, 16, 16);
  float4 v;
  memcpy(&v, p, sizeof v);
  *out = v.x;
}

__global__ void k_spin_on_flag(const volatile unsigned* flag, unsigned* seen) {
  while (*flag == 0)
    __nanosleep(2000);
  __threadfence_system();
  *seen = *flag;
}

__global__ void k_count_threads(unsigned* n) {
  atomicAdd(n, 1u);
}

// ---- helpers -----------------------------------------------------------------------------------
template <class T>
T* dev_alloc(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemset(p, 0, n * sizeof(T)), cudaSuccess);
  return static_cast<T*>(p);
}
template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
template <class T>
void to_device(T* d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

// A fault is sticky for the process (as on a GPU); the fault tests run in a child process.
template <class F>
void expect_fault_in_child(F f, cudaError_t want, const char* what) {
  // A fresh process (a forked child would lack the parent's queue threads).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        f();
        const cudaError_t e = cudaDeviceSynchronize();
        std::fprintf(stderr, "SYNC=%s\n", cudaGetErrorName(e));
        std::exit(e == want ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), what);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// ---- tests -------------------------------------------------------------------------------------
TEST(Executor, SyncthreadsOrdersASharedMemoryTree) {
  constexpr int kBlocks = 8;
  std::vector<double> h(kBlocks * 256);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = double(i % 97) * 0.5;
  double* x = dev_alloc<double>(h.size());
  double* out = dev_alloc<double>(kBlocks);
  to_device(x, h);
  CUDAEMU_LAUNCH(kBlocks, 256, 0, nullptr, k_tree_sum)(x, out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto got = to_host(out, kBlocks);
  for (int b = 0; b < kBlocks; ++b) {
    double want = 0;
    for (int t = 0; t < 256; ++t)
      want += h[size_t(b) * 256 + size_t(t)];
    EXPECT_EQ(got[size_t(b)], want) << "block " << b;
  }
  cudaFree(x);
  cudaFree(out);
}

TEST(Executor, WarpShufflesReadTheValuesAtArrival) {
  int* out = dev_alloc<int>(64 * 6);
  CUDAEMU_LAUNCH(1, 64, 0, nullptr, k_shuffles)(out);
  const auto o = to_host(out, 64 * 6);
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    const int* r = &o[size_t(6 * t)];
    EXPECT_EQ(r[0], (base + (lane ^ 1)) * 10) << t;
    EXPECT_EQ(r[1], (base + (lane ^ 16)) * 10) << t;
    EXPECT_EQ(r[2], (lane < 3 ? t : t - 3) * 10) << t;
    EXPECT_EQ(r[3], (lane + 5 >= 32 ? t : t + 5) * 10) << t;
    EXPECT_EQ(r[4], (base + 7) * 10) << t;
    EXPECT_EQ(r[5], (base + (lane ^ 2)) * 10) << t;
  }
  cudaFree(out);
}

TEST(Executor, CollectivesOnPartialMasksInDivergentPaths) {
  int* out = dev_alloc<int>(32);
  CUDAEMU_LAUNCH(1, 32, 0, nullptr, k_half_masks)(out);
  const auto o = to_host(out, 32);
  for (int lane = 0; lane < 16; ++lane)
    EXPECT_EQ(o[size_t(lane)], lane == 15 ? 15 : lane + 1) << lane;
  for (int lane = 16; lane < 32; ++lane)
    EXPECT_EQ(o[size_t(lane)], lane ^ 4) << lane;
  cudaFree(out);
}

TEST(Executor, BallotAnyAll) {
  unsigned* out = dev_alloc<unsigned>(8);
  CUDAEMU_LAUNCH(1, 64, 0, nullptr, k_votes)(out);
  const auto o = to_host(out, 8);
  unsigned want = 0;
  for (int l = 0; l < 32; l += 3)
    want |= 1u << l;
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(o[size_t(4 * w)], want);
    EXPECT_EQ(o[size_t(4 * w + 1)], unsigned(w == 1));
    EXPECT_EQ(o[size_t(4 * w + 2)], 1u);
    EXPECT_EQ(o[size_t(4 * w + 3)], 0u);
  }
  cudaFree(out);
}

TEST(Executor, AtomicsFromManyBlocks) {
  constexpr unsigned kBlocks = 40, kThreads = 128, kAll = kBlocks * kThreads;
  int* i = dev_alloc<int>(1);
  auto* u = dev_alloc<unsigned long long>(1);
  float* f = dev_alloc<float>(1);
  double* d = dev_alloc<double>(1);
  unsigned* mx = dev_alloc<unsigned>(1);
  unsigned* mn = dev_alloc<unsigned>(1);
  auto* bits = dev_alloc<unsigned long long>(4);
  to_device(mn, std::vector<unsigned>{~0u});
  // Two streams: their kernels may run on two queue threads at once, on the same words.
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  CUDAEMU_LAUNCH(kBlocks, kThreads, 0, s1, k_atomics)(i, u, f, d, mx, mn, bits);
  CUDAEMU_LAUNCH(kBlocks, kThreads, 0, s2, k_atomics)(i, u, f, d, mx, mn, bits);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(i, 1)[0], int(2 * kAll));
  EXPECT_EQ(to_host(u, 1)[0], 6ull * kAll);
  EXPECT_EQ(to_host(f, 1)[0], float(kAll));  // multiples of 0.5 up to 10240: exact
  EXPECT_EQ(to_host(d, 1)[0], 0.5 * kAll);
  EXPECT_EQ(to_host(mx, 1)[0], kAll - 1);
  EXPECT_EQ(to_host(mn, 1)[0], 7u);
  for (unsigned long long w : to_host(bits, 4))
    EXPECT_NE(w, 0ull);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  for (void* p : std::initializer_list<void*>{i, u, f, d, mx, mn, bits})
    cudaFree(p);
}

TEST(Executor, ExitedThreadsCountAsArrivedAtTheBarrier) {
  int* out = dev_alloc<int>(3);
  CUDAEMU_LAUNCH(1, 128, 0, nullptr, k_sync_count)(out);
  const auto o = to_host(out, 3);
  EXPECT_EQ(o[0], 32);  // even threads below 64
  EXPECT_EQ(o[1], 1);
  EXPECT_EQ(o[2], 1);
  cudaFree(out);
}

TEST(Executor, DynamicSharedMemoryIsPerBlock) {
  constexpr unsigned kBlocks = 3, kThreads = 96;
  std::vector<int> h(kBlocks * kThreads);
  for (size_t k = 0; k < h.size(); ++k)
    h[k] = int(k);
  int* x = dev_alloc<int>(h.size());
  to_device(x, h);
  CUDAEMU_LAUNCH(kBlocks, kThreads, kThreads * sizeof(int), nullptr, k_dynamic_reverse)(x);
  const auto o = to_host(x, h.size());
  for (unsigned b = 0; b < kBlocks; ++b)
    for (unsigned t = 0; t < kThreads; ++t)
      EXPECT_EQ(o[b * kThreads + t], int(b * kThreads + kThreads - 1 - t));
  cudaFree(x);
}

TEST(Executor, EveryThreadOfA3DGridRuns) {
  unsigned* n = dev_alloc<unsigned>(1);
  CUDAEMU_LAUNCH(dim3(3, 2, 2), dim3(8, 4, 2), 0, nullptr, k_count_threads)(n);
  EXPECT_EQ(to_host(n, 1)[0], 12u * 64u);
  cudaFree(n);
}

TEST(Executor, RefusesShapesCudaRefuses) {
  unsigned* n = dev_alloc<unsigned>(1);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const dim3 bad_blocks[] = {dim3(1025), dim3(0), dim3(32, 32, 2), dim3(1, 1, 65)};
  for (const dim3& b : bad_blocks) {
    CUDAEMU_LAUNCH(1, b, 0, nullptr, k_count_threads)(n);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << b.x << "x" << b.y << "x" << b.z;
  }
  CUDAEMU_LAUNCH(dim3(1, 65536), 32, 0, nullptr, k_count_threads)(n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CUDAEMU_LAUNCH(1, 32, 49 * 1024, nullptr, k_count_threads)(n);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(n, 1)[0], 0u) << "a refused launch ran";
  cudaFree(n);
}

TEST(ExecutorDeathTest, ALaneMissingFromAShuffleIsReportedNotHung) {
  expect_fault_in_child(
      [] {
        int* out = dev_alloc<int>(64);
        CUDAEMU_LAUNCH(1, 64, 0, nullptr, k_missing_lane)(out);
      },
      cudaErrorLaunchTimeout, "deadlock.*lanes 0x80000000 never join");
}

TEST(ExecutorDeathTest, ABarrierAgainstAWarpCollectiveIsReported) {
  expect_fault_in_child(
      [] {
        int* out = dev_alloc<int>(64);
        CUDAEMU_LAUNCH(1, 64, 0, nullptr, k_barrier_vs_warp)(out);
      },
      cudaErrorLaunchTimeout, "deadlock.*33 at __syncthreads");
}

TEST(ExecutorDeathTest, AMisalignedSixteenByteAccessIsReported) {
  expect_fault_in_child(
      [] {
        char* p = dev_alloc<char>(64);
        float* out = dev_alloc<float>(1);
        CUDAEMU_LAUNCH(1, 1, 0, nullptr, k_load16)(p + 4, out);
      },
      cudaErrorMisalignedAddress, "misaligned 16-byte access");
}

TEST(ExecutorDeathTest, AnAccessOutsideDeviceMemoryIsReported) {
  expect_fault_in_child(
      [] {
        alignas(16) static char host[64];
        float* out = dev_alloc<float>(1);
        CUDAEMU_LAUNCH(1, 1, 0, nullptr, k_load16)(host, out);
      },
      cudaErrorIllegalAddress, "outside every device allocation");
}

TEST(Executor, ASpinKernelSleepsUntilTheHostWrites) {
  unsigned* flag = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(unsigned), cudaHostAllocMapped),
            cudaSuccess);
  *flag = 0;
  unsigned* flag_dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0), cudaSuccess);
  unsigned* seen = dev_alloc<unsigned>(1);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  CUDAEMU_LAUNCH(1, 1, 0, s, k_spin_on_flag)(flag_dev, seen);
  const double cpu0 = cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the kernel finished before the write";
  const double cpu = cpu_seconds() - cpu0;
  __atomic_store_n(flag, 5u, __ATOMIC_SEQ_CST);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(to_host(seen, 1)[0], 5u);
  std::printf("spin kernel: %.0f ms of CPU in 300 ms of waiting\n", cpu * 1e3);
  EXPECT_LT(cpu, 0.15) << "the polling kernel burned a core";
  cudaStreamDestroy(s);
  cudaFreeHost(flag);
  cudaFree(seen);
}

}  // namespace
