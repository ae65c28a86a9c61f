// Strict mode (CUDAEMU_STRICT=1): hazards that hang or pass by luck on a GPU fail loudly here.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// What a releaser thread's call may use: made before the stream is held.
struct ReleaserCtx {
  Words pinned;
  cudaEvent_t ev = nullptr;
  cudaStream_t held = nullptr;
};

// CUDAEMU_RELEASERS names the threads that release host waits (they set the words streams wait
// on, with no CUDA call). Such a thread making any CUDA call while a stream waits on the host
// dies, whatever the call: a lock-free query, a pinned copy, even cudaGetLastError.
void releaser_call_dies(void (*call)(ReleaserCtx&), const char* name) {
  setenv("CUDAEMU_STRICT", "1", 1);
  setenv("CUDAEMU_RELEASERS", "other-prefix,relsr", 1);
  EXPECT_DEATH(
      {
        ReleaserCtx c;
        cudaEventCreateWithFlags(&c.ev, cudaEventDisableTiming);
        hold_stream(c.pinned, &c.held);
        std::thread t([&] {
          pthread_setname_np(pthread_self(), "relsr-1");
          call(c);
        });
        t.join();
        c.pinned.set(0, 1);  // no death: release the stream, so that the cleanup returns
        cudaStreamSynchronize(c.held);
      },
      std::string("cudaemu strict: ") + name +
          " on thread [0-9]+ \\(relsr-1\\), which releases host waits \\(CUDAEMU_RELEASERS\\), "
          "while stream [0-9]+ \\(queue [0-9]+.*\\) held by cuStreamWaitValue32 on host memory "
          "waits on the host");
  unsetenv("CUDAEMU_RELEASERS");
  unsetenv("CUDAEMU_STRICT");
}

TEST(cudaemuDeathTest, StrictReleaserThreadMakesACudaCallWhileAStreamWaitsOnTheHost) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  releaser_call_dies([](ReleaserCtx& c) { cudaEventQuery(c.ev); }, "cudaEventQuery");
  releaser_call_dies(
      [](ReleaserCtx& c) {
        cudaMemcpyAsync(c.pinned.at(2), c.pinned.at(1), 4, cudaMemcpyHostToHost, nullptr);
      },
      "cudaMemcpyAsync");
  releaser_call_dies([](ReleaserCtx&) { cudaGetLastError(); }, "cudaGetLastError");
}

using Clock = std::chrono::steady_clock;

// Prints what failed and exits 1 (inside EXPECT_EXIT's child).
#define CHILD_CHECK(cond)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #cond); \
      std::fflush(stderr);                                                    \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

// Stream A waits on a host word; a thread named relsr-2 sets it 200 ms later with a plain atomic
// store and no CUDA call. Meanwhile this (unnamed) thread allocates, copies through pageable
// memory and frees: under CUDAEMU_RELEASERS these are stalls, not hazards. The copies complete
// while A is held; cudaFree really waits for the device, so it returns after the release.
void application_thread_stalls_until_the_release() {
  Words f;
  cudaStream_t a = nullptr;
  hold_stream(f, &a);
  std::atomic<bool> released{false};
  Clock::time_point released_at{};
  std::thread releaser([&] {
    pthread_setname_np(pthread_self(), "relsr-2");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released_at = Clock::now();
    released.store(true);
    f.set(0, 1);
  });
  void* d = nullptr;
  CHILD_CHECK(cudaMalloc(&d, 1 << 20) == cudaSuccess);
  CHILD_CHECK(cudaMemset(d, 0x5A, 1 << 20) == cudaSuccess);
  std::vector<unsigned char> host(1 << 20);  // pageable
  CHILD_CHECK(cudaMemcpy(host.data(), d, host.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHILD_CHECK(host[0] == 0x5A && host.back() == 0x5A);
  cudaStream_t own = stream_off({a});
  CHILD_CHECK(own != nullptr);
  std::vector<unsigned char> host2(4096, 0);
  CHILD_CHECK(cudaMemcpyAsync(host2.data(), d, host2.size(), cudaMemcpyDeviceToHost, own) ==
              cudaSuccess);
  CHILD_CHECK(host2[0] == 0x5A);
  CHILD_CHECK(!released.load());  // the copies did not wait for A
  CHILD_CHECK(cudaFree(d) == cudaSuccess);
  const Clock::time_point freed_at = Clock::now();
  CHILD_CHECK(released.load());  // cudaFree waited for the device, A included
  CHILD_CHECK(freed_at >= released_at);
  releaser.join();
  CHILD_CHECK(cudaStreamDestroy(own) == cudaSuccess);
  CHILD_CHECK(cudaStreamDestroy(a) == cudaSuccess);
  std::exit(0);
}

TEST(cudaemuDeathTest, StrictWithReleasersOtherThreadsStallUntilTheRelease) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_STRICT", "1", 1);
  setenv("CUDAEMU_RELEASERS", "relsr", 1);
  EXPECT_EXIT(application_thread_stalls_until_the_release(), testing::ExitedWithCode(0), "");
  unsetenv("CUDAEMU_RELEASERS");
  unsetenv("CUDAEMU_STRICT");
}

TEST(cudaemuDeathTest, StrictWithoutReleasersEveryThreadIsChecked) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_STRICT", "1", 1);
  unsetenv("CUDAEMU_RELEASERS");
  // The application thread's cudaMalloc is a hazard again, whatever the thread's name.
  EXPECT_DEATH(application_thread_stalls_until_the_release(),
               "cudaemu strict: a call that may take a driver lock: cudaMalloc on thread .* "
               "while stream .* held by cuStreamWaitValue32 on host memory waits on the host");
  // A thread named like a releaser is not singled out: a call that takes no lock is no hazard.
  EXPECT_EXIT(
      {
        Words f;
        cudaEvent_t ev = nullptr;
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        cudaStream_t s = nullptr;
        hold_stream(f, &s);
        cudaError_t e = cudaErrorUnknown;
        std::thread t([&] {
          pthread_setname_np(pthread_self(), "relsr-1");
          e = cudaEventQuery(ev);
        });
        t.join();
        std::exit(e == cudaSuccess ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
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
