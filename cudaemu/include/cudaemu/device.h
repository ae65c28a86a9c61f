// The shim that compiles a `.cu` file as C++ for the emulated CUDA runtime (-Demulated_cuda=true):
// the build includes it before the `.cu` (a generated `x.cu.cc`). It takes the runtime API, the
// vector types and the half/bf16 types from the real toolkit's headers (host mode, never the
// device-only ones), then defines the CUDA keywords, the built-in variables, the intrinsics the
// project's kernels use, and the launch `CUDAEMU_LAUNCH(grid, block, shared, stream, kernel)(args)`
// that `SCCL_LAUNCH` (kernels/cuda/kernel_launch.h) becomes here. Kernels run in the executor
// (cudaemu/exec/): one block at a time per queue thread, its threads as fibers.
//
// __CUDACC__ and __CUDA_ARCH__ (900) are defined for the whole translation unit once the toolkit
// headers are in: the device branches (`#if defined(__CUDA_ARCH__)`) are the ones compiled, also
// for the `.cu` file's host functions, which is harmless because those branches only differ in
// access width; the executor's checks in them apply inside a running kernel only.
#pragma once
#define CUDAEMU_DEVICE_H 1

#include <cuda_runtime.h>
// nccl.h and the codecs include these; in host mode now, before __CUDACC__ is defined below.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cudaemu/work.h"

#define CUDAEMU_EXPORT __attribute__((visibility("default")))

// ---- keywords
// ------------------------------------------------------------------------------------
// A kernel or device function the translation unit does not call is no warning under nvcc either.
#undef __global__
#define __global__ __attribute__((unused))
#undef __device__
#define __device__ __attribute__((unused))
#undef __host__
#define __host__
#undef __constant__
#define __constant__
#undef __managed__
#define __managed__
// A block's threads share their OS thread (and only one block runs on it at a time), so a
// thread_local variable is per-block memory. Like real shared memory it is not re-initialised.
#undef __shared__
#define __shared__ thread_local
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#undef __launch_bounds__
#define __launch_bounds__(...)

// ---- built-in variables: the running thread's, set by the executor on every fiber switch
// ----------
CUDAEMU_EXPORT extern thread_local uint3 threadIdx;
CUDAEMU_EXPORT extern thread_local uint3 blockIdx;
CUDAEMU_EXPORT extern thread_local dim3 blockDim;
CUDAEMU_EXPORT extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

// ---- what the intrinsics call in the executor (cudaemu/exec/)
// ------------------------------------
namespace cudaemu::dev {

enum WarpOp : int { kSyncWarp, kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

// __syncthreads and its predicate forms: returns how many arriving threads had pred != 0 and sets
// *arrived to how many threads arrived (exited threads count as arrived but give no predicate).
CUDAEMU_EXPORT int sync_block(int pred, int* arrived);
// A warp collective: every existing lane named in `mask` arrives with the same mask, then each
// reads its result (the source lane's value for shuffles, the vote for ballot/any/all).
CUDAEMU_EXPORT unsigned long long warp_op(int op, unsigned mask, unsigned long long value,
                                          int param, int width);
CUDAEMU_EXPORT unsigned active_mask();
// Yields the fiber; when every thread of the block sleeps, the queue thread sleeps.
CUDAEMU_EXPORT void nanosleep(unsigned ns);
// The block's dynamic shared memory (LaunchShape::dynamic_shared bytes, 16-byte aligned).
CUDAEMU_EXPORT void* dynamic_shared();
// Inside a running kernel: reports a misaligned (cudaErrorMisalignedAddress) or out-of-allocation
// (cudaErrorIllegalAddress) access of `bytes` at `p`; outside a kernel it does nothing.
CUDAEMU_EXPORT void check_access(const void* p, size_t bytes, size_t align);
CUDAEMU_EXPORT bool in_kernel();
// `<<<>>>`: checks the shape, loads the function, queues the grid on `stream` (each thread runs
// `thread_body`); a refused launch sets the last error.
CUDAEMU_EXPORT void launch(const void* fn, const char* name, const LaunchShape& shape,
                           cudaStream_t stream, std::function<void()> thread_body);

template <class T>
unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "a warp value is <= 8 bytes");
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(unsigned long long b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}
// Read-modify-write by compare-and-swap (floating point, min/max): device memory may be touched by
// kernels on other queue threads at the same time.
template <class T, class F>
T atomic_update(T* p, F f) {
  T old;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  T next = f(old);
  while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    next = f(old);
  return old;
}

}  // namespace cudaemu::dev

// ---- synchronization
// -------------------------------------------------------------------------------
inline void __syncthreads() {
  int n = 0;
  cudaemu::dev::sync_block(0, &n);
}
inline int __syncthreads_count(int pred) {
  int n = 0;
  return cudaemu::dev::sync_block(pred, &n);
}
inline int __syncthreads_or(int pred) {
  int n = 0;
  return cudaemu::dev::sync_block(pred, &n) != 0;
}
inline int __syncthreads_and(int pred) {
  int n = 0;
  return cudaemu::dev::sync_block(pred, &n) == n;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  cudaemu::dev::warp_op(cudaemu::dev::kSyncWarp, mask, 0, 0, 32);
}
inline unsigned __activemask() {
  return cudaemu::dev::active_mask();
}
inline void __nanosleep(unsigned ns) {
  cudaemu::dev::nanosleep(ns);
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_block() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
inline void __threadfence_system() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
// Nanoseconds of the host's steady clock (timing is not modelled).
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- warp shuffles and votes
// -------------------------------------------------------------------------
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return cudaemu::dev::from_bits<T>(
      cudaemu::dev::warp_op(cudaemu::dev::kShfl, mask, cudaemu::dev::to_bits(v), src_lane, width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cudaemu::dev::from_bits<T>(cudaemu::dev::warp_op(
      cudaemu::dev::kShflUp, mask, cudaemu::dev::to_bits(v), int(delta), width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return cudaemu::dev::from_bits<T>(cudaemu::dev::warp_op(
      cudaemu::dev::kShflDown, mask, cudaemu::dev::to_bits(v), int(delta), width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return cudaemu::dev::from_bits<T>(cudaemu::dev::warp_op(
      cudaemu::dev::kShflXor, mask, cudaemu::dev::to_bits(v), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return unsigned(cudaemu::dev::warp_op(cudaemu::dev::kBallot, mask, pred != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int pred) {
  return int(cudaemu::dev::warp_op(cudaemu::dev::kAny, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
  return int(cudaemu::dev::warp_op(cudaemu::dev::kAll, mask, pred != 0, 0, 32));
}

// ---- atomics (CUDA's overload set)
// ---------------------------------------------------------------------
#define CUDAEMU_ATOMIC_INT(name, builtin, T) \
  inline T name(T* p, T v) {                 \
    return builtin(p, v, __ATOMIC_SEQ_CST);  \
  }
#define CUDAEMU_ATOMIC_INTS(name, builtin)    \
  CUDAEMU_ATOMIC_INT(name, builtin, int)      \
  CUDAEMU_ATOMIC_INT(name, builtin, unsigned) \
  CUDAEMU_ATOMIC_INT(name, builtin, unsigned long long)
CUDAEMU_ATOMIC_INTS(atomicAdd, __atomic_fetch_add)
CUDAEMU_ATOMIC_INTS(atomicAnd, __atomic_fetch_and)
CUDAEMU_ATOMIC_INTS(atomicOr, __atomic_fetch_or)
CUDAEMU_ATOMIC_INTS(atomicXor, __atomic_fetch_xor)
CUDAEMU_ATOMIC_INTS(atomicExch, __atomic_exchange_n)
CUDAEMU_ATOMIC_INT(atomicSub, __atomic_fetch_sub, int)
CUDAEMU_ATOMIC_INT(atomicSub, __atomic_fetch_sub, unsigned)
#undef CUDAEMU_ATOMIC_INTS
#undef CUDAEMU_ATOMIC_INT
inline float atomicAdd(float* p, float v) {
  return cudaemu::dev::atomic_update(p, [v](float o) { return o + v; });
}
inline double atomicAdd(double* p, double v) {
  return cudaemu::dev::atomic_update(p, [v](double o) { return o + v; });
}
inline float atomicExch(float* p, float v) {
  return cudaemu::dev::atomic_update(p, [v](float) { return v; });
}
#define CUDAEMU_ATOMIC_MINMAX(T)                                               \
  inline T atomicMin(T* p, T v) {                                              \
    return cudaemu::dev::atomic_update(p, [v](T o) { return v < o ? v : o; }); \
  }                                                                            \
  inline T atomicMax(T* p, T v) {                                              \
    return cudaemu::dev::atomic_update(p, [v](T o) { return v > o ? v : o; }); \
  }
CUDAEMU_ATOMIC_MINMAX(int)
CUDAEMU_ATOMIC_MINMAX(unsigned)
CUDAEMU_ATOMIC_MINMAX(long long)
CUDAEMU_ATOMIC_MINMAX(unsigned long long)
#undef CUDAEMU_ATOMIC_MINMAX
template <class T>
T atomicCAS(T* p, T compare, T value) {
  static_assert(std::is_integral_v<T> && (sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8),
                "atomicCAS takes 16-, 32- and 64-bit integers");
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
inline unsigned atomicInc(unsigned* p, unsigned limit) {
  return cudaemu::dev::atomic_update(p, [limit](unsigned o) { return o >= limit ? 0u : o + 1; });
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
  return cudaemu::dev::atomic_update(
      p, [limit](unsigned o) { return (o == 0 || o > limit) ? limit : o - 1; });
}

// ---- integer and float intrinsics
// --------------------------------------------------------------------
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline int __ffsll(long long x) {
  return __builtin_ffsll(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(unsigned(x));
}
inline int __clzll(long long x) {
  return x == 0 ? 64 : __builtin_clzll((unsigned long long)x);
}
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (static_cast<unsigned long long>(__brev(unsigned(x))) << 32) | __brev(unsigned(x >> 32));
}
template <class T>
T __ldg(const T* p) {
  return *p;
}
inline float __int_as_float(int x) {
  return cudaemu::dev::from_bits<float>(cudaemu::dev::to_bits(x));
}
inline int __float_as_int(float x) {
  return cudaemu::dev::from_bits<int>(cudaemu::dev::to_bits(x));
}
inline float __uint_as_float(unsigned x) {
  return cudaemu::dev::from_bits<float>(cudaemu::dev::to_bits(x));
}
inline unsigned __float_as_uint(float x) {
  return cudaemu::dev::from_bits<unsigned>(cudaemu::dev::to_bits(x));
}
inline float __fdividef(float a, float b) {
  return a / b;
}

// ---- the launch
// ---- the runtime's C++ overloads, which cuda_runtime.h declares for nvcc only
// ------------------------
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
  return ::cudaFuncGetAttributes(attr, reinterpret_cast<const void*>(entry));
}

// ------------------------------------------------------------------------------------
namespace cudaemu {

template <class... P>
class KernelLaunch {
 public:
  KernelLaunch(void (*kernel)(P...), const char* name, LaunchShape shape, cudaStream_t stream)
      : kernel_(kernel), name_(name), shape_(shape), stream_(stream) {}
  // Copies the arguments as the kernel's parameters (by value, as CUDA does); every thread of
  // the grid calls the kernel with its own copy of them.
  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "a kernel launch passes every parameter");
    dev::launch(reinterpret_cast<const void*>(kernel_), name_, shape_, stream_,
                [k = kernel_, params = std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)] {
                  std::apply(k, params);
                });
  }

 private:
  void (*kernel_)(P...);
  const char* name_;
  LaunchShape shape_;
  cudaStream_t stream_;
};

template <class... P>
KernelLaunch<P...> launch_of(const char* name, dim3 grid, dim3 block, size_t shared,
                             cudaStream_t stream, void (*kernel)(P...)) {
  return KernelLaunch<P...>(kernel, name, LaunchShape{grid, block, shared}, stream);
}

}  // namespace cudaemu

// kernel<<<grid, block, shared, stream>>>(args...) as CUDAEMU_LAUNCH(grid, block, shared, stream,
// kernel)(args...); the kernel is last so that a template's commas need no parentheses.
#define CUDAEMU_LAUNCH(grid, block, shared, stream, ...) \
  ::cudaemu::launch_of(#__VA_ARGS__, grid, block, shared, stream, __VA_ARGS__)

// The device-code view of the rest of the translation unit (see the top of this file).
#define __CUDACC__ 1
#define __CUDA_ARCH__ 900
