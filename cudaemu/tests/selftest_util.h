// Helpers of the emulator's self-test: host flags that hold a stream, bounded waits.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "cudaemu/introspect.h"
#include "cudaemu/work.h"

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace cudaemu_test {

using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// The stream memory operations, through the driver entry points as the backend gets them.
inline WaitFn wait_value() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<WaitFn>(fn);
}
inline WriteFn write_value() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<WriteFn>(fn);
}

// Page-locked, mapped words the host writes and streams wait on (or write).
struct Words {
  explicit Words(int n = 16) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, 64 * static_cast<size_t>(n), cudaHostAllocMapped) == cudaSuccess) {
      w = static_cast<uint32_t*>(p);
      for (int i = 0; i < n * 16; ++i)
        w[i] = 0;
    }
  }
  ~Words() {
    if (w != nullptr) cudaFreeHost(w);
  }
  uint32_t* at(int i) const { return w + 16 * i; }
  CUdeviceptr dev(int i) const { return reinterpret_cast<CUdeviceptr>(at(i)); }
  uint32_t get(int i) const { return __atomic_load_n(at(i), __ATOMIC_ACQUIRE); }
  void set(int i, uint32_t v) const { __atomic_store_n(at(i), v, __ATOMIC_RELEASE); }
  uint32_t* w = nullptr;
};

// True once `pred` holds, false if it still does not after `ms` milliseconds.
inline bool eventually(const std::function<bool()>& pred, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

// True if `pred` never holds during `ms` milliseconds.
inline bool stays_false(const std::function<bool()>& pred, int ms = 200) {
  return !eventually(pred, ms);
}

// A stream on a hardware queue none of `avoid` uses (the map is round-robin by default).
inline cudaStream_t stream_off(std::initializer_list<cudaStream_t> avoid,
                               unsigned flags = cudaStreamNonBlocking) {
  for (int tries = 0; tries < 64; ++tries) {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, flags) != cudaSuccess) return nullptr;
    bool clash = false;
    for (cudaStream_t a : avoid)
      clash = clash || cudaemu::stream_queue(a) == cudaemu::stream_queue(s);
    if (!clash) return s;
    cudaStreamDestroy(s);
  }
  return nullptr;
}

// Sleeps long enough for a queue thread to pick up its head item.
inline void settle() {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
}

}  // namespace cudaemu_test
