// Strict mode (CUDAEMU_STRICT=1): hazards that hang or pass by luck on a GPU fail loudly here.
#include <cstdlib>

#include "cudaemu/tests/selftest_util.h"

using namespace cudaemu_test;

namespace {

// Holds a fresh stream on a host word and waits until its queue is polling it.
void hold_stream(const Words& f, cudaStream_t* s) {
  cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
  wait_value()(*s, f.dev(0), 1, 0);
  settle();
}

TEST(cudaemuDeathTest, StrictLockingCallWhileAStreamWaitsOnTheHost) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_STRICT", "1", 1);
  EXPECT_DEATH(
      {
        Words f;
        cudaStream_t s = nullptr;
        hold_stream(f, &s);
        void* d = nullptr;
        cudaMalloc(&d, 64);
      },
      "cudaemu strict: a call that may take a driver lock: cudaMalloc on thread [0-9]+ .* while "
      "stream [0-9]+ \\(queue [0-9]+.*\\) held by cuStreamWaitValue32 on host memory waits on "
      "the host");
  unsetenv("CUDAEMU_STRICT");
}

TEST(cudaemuDeathTest, StrictDeviceSyncWhileAStreamWaitsOnTheHost) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_STRICT", "1", 1);
  EXPECT_DEATH(
      {
        void* d = nullptr;
        cudaMalloc(&d, 64);
        Words f;
        cudaStream_t s = nullptr;
        hold_stream(f, &s);
        cudaFree(d);
      },
      "cudaemu strict: a call that synchronizes the device would wait forever \\(deadlock\\): "
      "cudaFree on thread .* while stream .* held by cuStreamWaitValue32 on host memory");
  unsetenv("CUDAEMU_STRICT");
}

void CUDART_CB sleep_300ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

TEST(cudaemuDeathTest, StrictDeviceSyncWhileAQueuedWaitOnTheHostIsUnsatisfied) {
  // The wait has not reached its queue's head yet (work ahead of it), but the device
  // synchronization would wait for it all the same: a deadlock if this thread is the releaser.
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_STRICT", "1", 1);
  EXPECT_DEATH(
      {
        void* d = nullptr;
        cudaMalloc(&d, 64);
        Words f;
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        cudaLaunchHostFunc(s, sleep_300ms, nullptr);  // busy, but not waiting on the host
        wait_value()(s, f.dev(0), 1, 0);
        cudaFree(d);
      },
      "cudaemu strict: a call that synchronizes the device would wait forever \\(deadlock\\): "
      "cudaFree on thread .* held by cuStreamWaitValue32 on host memory \\(queued\\)");
  unsetenv("CUDAEMU_STRICT");
}

TEST(cudaemu, WithoutStrictModeAHeldStreamIsNoHazard) {
  // The same calls as above, without CUDAEMU_STRICT: a GPU takes them (cudaMalloc) or hangs
  // until the release (cudaFree, CudaFreeWaitsForAllQueuedWork).
  Words f;
  cudaStream_t s = nullptr;
  hold_stream(f, &s);
  void* d = nullptr;
  CUDA_OK(cudaMalloc(&d, 64));
  f.set(0, 1);
  CUDA_OK(cudaFree(d));
  cudaStreamDestroy(s);
}

}  // namespace
