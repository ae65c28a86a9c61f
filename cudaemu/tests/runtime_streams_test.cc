// The emulated runtime against CUDA's documented stream semantics: ordering, hardware queues,
// the legacy and per-thread default streams, events, host functions, launch blocking.
#include <cstdlib>
#include <mutex>
#include <vector>

#include "cudaemu/tests/selftest_util.h"

using namespace cudaemu_test;

namespace {

TEST(cudaemu, WorkInOneStreamRunsInOrder) {
  Words f;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ASSERT_EQ(wait_value()(s, f.dev(0), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  for (uint32_t i = 1; i <= 50; ++i)
    ASSERT_EQ(write_value()(s, f.dev(1), i, 0), CUDA_SUCCESS);
  // Held by its head: nothing behind it may run.
  EXPECT_TRUE(stays_false([&] { return f.get(1) != 0; }));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  f.set(0, 1);
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(f.get(1), 50u);
  CUDA_OK(cudaStreamDestroy(s));
}

// A: wait(w0) then write(w1); B: write(w0) then wait(w1). Completes only with A and B running
// at once, i.e. on different hardware queues.
void handshake(cudaStream_t a, cudaStream_t b, const Words& f) {
  ASSERT_EQ(wait_value()(a, f.dev(0), 1, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(write_value()(a, f.dev(1), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(write_value()(b, f.dev(0), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(wait_value()(b, f.dev(1), 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
}

TEST(cudaemu, StreamsOnDifferentQueuesRunConcurrently) {
  Words f;
  cudaStream_t a = stream_off({});
  cudaStream_t b = stream_off({a});
  ASSERT_NE(b, nullptr);
  handshake(a, b, f);
  EXPECT_TRUE(eventually([&] { return cudaStreamQuery(a) == cudaSuccess; }));
  EXPECT_TRUE(eventually([&] { return cudaStreamQuery(b) == cudaSuccess; }));
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// In a fresh process (the queue count is read at start): exits 0 when the handshake blocked.
void one_queue_child() {
  Words f;
  cudaStream_t a = nullptr;
  cudaStream_t b = nullptr;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  handshake(a, b, f);
  // B's write sits behind A's wait on the one queue: nothing moves.
  if (!stays_false([&] { return cudaStreamQuery(b) == cudaSuccess; }, 300)) std::exit(1);
  f.set(0, 1);  // released from the host
  if (!eventually([&] { return cudaStreamQuery(b) == cudaSuccess; })) std::exit(2);
  std::exit(cudaemu::stream_queue(a) == cudaemu::stream_queue(b) ? 0 : 3);
}

TEST(cudaemu, OneHardwareQueueSerializesEveryStream) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_HW_QUEUES", "1", 1);
  EXPECT_EXIT(one_queue_child(), testing::ExitedWithCode(0), "");
  unsetenv("CUDAEMU_HW_QUEUES");
}

void priority_map_child() {
  std::vector<int> low;
  std::vector<int> high;
  for (int i = 0; i < 4; ++i) {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0);
    low.push_back(cudaemu::stream_queue(s));
    cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -5);
    high.push_back(cudaemu::stream_queue(s));
  }
  for (int l : low)
    for (int h : high)
      if (l == h) std::exit(1);
  std::exit(0);
}

TEST(cudaemu, PriorityMapGivesEachLevelItsOwnQueues) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDAEMU_QUEUE_MAP", "priority", 1);
  EXPECT_EXIT(priority_map_child(), testing::ExitedWithCode(0), "");
  unsetenv("CUDAEMU_QUEUE_MAP");
}

TEST(cudaemu, LegacyStreamWaitsForBlockingStreamsOnly) {
  Words f;
  cudaStream_t legacy = nullptr;
  cudaStream_t blocking = stream_off({legacy}, cudaStreamDefault);
  cudaStream_t nonblocking = stream_off({legacy, blocking}, cudaStreamNonBlocking);
  ASSERT_NE(nonblocking, nullptr);
  // A held non-blocking stream does not hold the legacy stream.
  ASSERT_EQ(wait_value()(nonblocking, f.dev(0), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(write_value()(legacy, f.dev(1), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(eventually([&] { return f.get(1) == 1; }));
  // A held blocking stream does.
  ASSERT_EQ(wait_value()(blocking, f.dev(2), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(write_value()(legacy, f.dev(3), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(3) != 0; }));
  // And a blocking stream's later work waits for that legacy work.
  cudaStream_t blocking2 = stream_off({legacy, blocking, nonblocking}, cudaStreamDefault);
  ASSERT_EQ(write_value()(blocking2, f.dev(4), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(4) != 0; }));
  f.set(2, 1);
  EXPECT_TRUE(eventually([&] { return f.get(3) == 1 && f.get(4) == 1; }));
  f.set(0, 1);
  CUDA_OK(cudaDeviceSynchronize());
  for (cudaStream_t s : {blocking, nonblocking, blocking2})
    cudaStreamDestroy(s);
}

TEST(cudaemu, PerThreadDefaultStreamsAreDistinctAndSyncWithLegacy) {
  Words f;
  // This thread's per-thread stream held; another thread's per-thread stream still runs.
  ASSERT_EQ(wait_value()(cudaStreamPerThread, f.dev(0), 1, 0), CUDA_SUCCESS);
  const int mine = cudaemu::stream_queue(cudaStreamPerThread);
  int theirs = -1;
  std::thread([&] {
    theirs = cudaemu::stream_queue(cudaStreamPerThread);
    if (theirs != mine) {
      write_value()(cudaStreamPerThread, f.dev(1), 1, 0);
      cudaStreamSynchronize(cudaStreamPerThread);
    }
  }).join();
  if (theirs != mine) {
    EXPECT_EQ(f.get(1), 1u);
  }
  // Not a non-blocking stream: the legacy stream waits for it (CUDA's documented rule).
  ASSERT_EQ(write_value()(nullptr, f.dev(2), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(2) != 0; }));
  f.set(0, 1);
  CUDA_OK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(f.get(2), 1u);
}

TEST(cudaemu, EventsOrderQueryAndTime) {
  Words f;
  cudaStream_t a = stream_off({});
  cudaStream_t b = stream_off({a});
  cudaEvent_t start, stop, untimed;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  CUDA_OK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  CUDA_OK(cudaEventQuery(start));  // never recorded: complete
  CUDA_OK(cudaEventRecord(start, a));
  ASSERT_EQ(wait_value()(a, f.dev(0), 1, 0), CUDA_SUCCESS);
  CUDA_OK(cudaEventRecord(stop, a));
  CUDA_OK(cudaEventRecord(untimed, a));
  EXPECT_EQ(cudaEventQuery(stop), cudaErrorNotReady);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaErrorNotReady);
  cudaGetLastError();
  // B waits for the event: its write runs only after A's wait.
  CUDA_OK(cudaStreamWaitEvent(b, stop, 0));
  ASSERT_EQ(write_value()(b, f.dev(1), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(1) != 0; }, 100));
  f.set(0, 1);
  CUDA_OK(cudaEventSynchronize(stop));
  CUDA_OK(cudaEventQuery(stop));
  CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
  EXPECT_GE(ms, 90.0f);  // held for at least the 100 ms above
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CUDA_OK(cudaStreamSynchronize(b));
  EXPECT_EQ(f.get(1), 1u);
  for (cudaEvent_t e : {start, stop, untimed})
    cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

struct HostLog {
  std::mutex mu;
  std::vector<std::pair<int, std::thread::id>> calls;
  std::atomic<bool> release{false};
  cudaError_t inner = cudaSuccess;
};
struct HostArg {
  HostLog* log;
  int tag;
};

void CUDART_CB log_call(void* p) {
  auto* a = static_cast<HostArg*>(p);
  std::lock_guard<std::mutex> lock(a->log->mu);
  a->log->calls.emplace_back(a->tag, std::this_thread::get_id());
}

void CUDART_CB blocking_call(void* p) {
  auto* log = static_cast<HostLog*>(p);
  void* d = nullptr;
  log->inner = cudaMalloc(&d, 16);  // refused inside a host function
  while (!log->release.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(cudaemu, HostFunctionsRunOnOneThreadInOrderAndHoldTheirStream) {
  HostLog log;
  Words f;
  cudaStream_t s[3];
  for (auto& x : s)
    CUDA_OK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  std::vector<HostArg> args;
  args.reserve(30);
  for (int i = 0; i < 30; ++i)
    args.push_back({&log, i});
  for (int i = 0; i < 30; ++i)
    CUDA_OK(cudaLaunchHostFunc(s[i % 3], log_call, &args[static_cast<size_t>(i)]));
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(log.calls.size(), 30u);
  std::vector<int> last(3, -1);
  for (const auto& c : log.calls) {
    EXPECT_EQ(c.second, log.calls[0].second);  // one callback thread
    EXPECT_NE(c.second, std::this_thread::get_id());
    EXPECT_GT(c.first, last[static_cast<size_t>(c.first % 3)]);  // in order per stream
    last[static_cast<size_t>(c.first % 3)] = c.first;
  }
  // A host function holds its stream until it returns.
  CUDA_OK(cudaLaunchHostFunc(s[0], blocking_call, &log));
  ASSERT_EQ(write_value()(s[0], f.dev(0), 1, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(0) != 0; }));
  log.release = true;
  CUDA_OK(cudaStreamSynchronize(s[0]));
  EXPECT_EQ(f.get(0), 1u);
  EXPECT_EQ(log.inner, cudaErrorNotPermitted);
  for (auto& x : s)
    cudaStreamDestroy(x);
}

void launch_blocking_child() {
  Words f;
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    f.set(0, 1);
  });
  const auto t0 = std::chrono::steady_clock::now();
  wait_value()(s, f.dev(0), 1, 0);
  const auto waited = std::chrono::steady_clock::now() - t0;
  t.join();
  std::exit(waited >= std::chrono::milliseconds(100) ? 0 : 1);
}

TEST(cudaemu, LaunchBlockingReturnsOnlyOnceTheWorkIsDone) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  EXPECT_EXIT(launch_blocking_child(), testing::ExitedWithCode(0), "");
  unsetenv("CUDA_LAUNCH_BLOCKING");
}

TEST(cudaemu, DeviceAndVersions) {
  int n = 0, v = 0, least = 1, greatest = 1;
  CUDA_OK(cudaGetDeviceCount(&n));
  EXPECT_EQ(n, 1);
  CUDA_OK(cudaSetDevice(0));
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CUDA_OK(cudaRuntimeGetVersion(&v));
  EXPECT_EQ(v, 13000);
  CUDA_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -5);
  CUDA_OK(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryPoolsSupported, 0));
  EXPECT_EQ(v, 1);
  cudaDeviceProp p{};
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  EXPECT_EQ(p.major * 10 + p.minor, 90);
  EXPECT_STRNE(cudaGetErrorString(cudaErrorStreamCaptureInvalidated), "unrecognized error code");
}

}  // namespace
