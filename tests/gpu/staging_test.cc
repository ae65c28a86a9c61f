// The staged device call (src/backend/device_staging.h) on the CUDA runtime: a real cudaStream
// (a GPU's, or the emulated one's), with a thread named like SketchCCL's proxy ("sccl-proxy")
// playing the proxy: it waits for the staged input, writes out() and releases, without a single
// CUDA call. Suite 'gpu': every test needs a device and skips itself without one (then the binary
// exits 77, Meson's SKIP). The checks that need no device are in nodevice_test.cc; the whole
// AllReduce through nccl.h is api_test.cc's and first_contact_test.cc's.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/device_runtime.h"
#include "src/backend/device_staging.h"
#include "src/backend/memory_pool.h"
#include "src/core/status.h"
#include "tests/gpu/have_device.h"
#include "tests/gpu/test_kernels.h"

namespace sketchccl::backend {
namespace {

using sketchccl::gpu_test::have_device;

#define SKIP_WITHOUT_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"

#define CUDA_ASSERT(call) ASSERT_EQ((call), cudaSuccess) << #call

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A hang fails the test (the whole binary) instead of running into Meson's timeout.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what)
      : what_(std::move(what)), t_([this, seconds] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                            [this] { return done_; })) {
            std::fprintf(stderr, "HANG: %s did not finish within %.0f s\n", what_.c_str(), seconds);
            std::fflush(stderr);
            std::_Exit(1);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  const std::string what_;
  std::thread t_;
};

// Where the test's buffers live: device memory, or pinned host memory (cudaHostAlloc), which
// stream work writes too and a staged call orders alike.
enum class Mem { kDevice, kPinned };

struct Buf {
  void* p = nullptr;
  Mem mem = Mem::kDevice;
  Buf(size_t bytes, Mem m) : mem(m) {
    const cudaError_t e =
        m == Mem::kDevice ? cudaMalloc(&p, bytes)
                          : cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    EXPECT_EQ(e, cudaSuccess);
  }
  ~Buf() { mem == Mem::kDevice ? cudaFree(p) : cudaFreeHost(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

// The input fill_after_delay writes: base + i % 7.
float input_at(size_t i, float base) {
  return base + static_cast<float>(i % 7);
}

// The "engine" of these tests, on the staged copies: an AllReduce's shape (out as large as in):
// out[i] = 2 in[i] + 1; a ReduceScatter's (out half of in): out[i] = in[i] + in[i + n/2].
void compute(const float* in, size_t n_in, float* out, size_t n_out) {
  if (n_out == n_in) {
    for (size_t i = 0; i < n_out; ++i)
      out[i] = 2 * in[i] + 1;
  } else {
    for (size_t i = 0; i < n_out; ++i)
      out[i] = in[i] + in[i + n_out];
  }
}

std::vector<float> expected(size_t n_in, size_t n_out, float base) {
  std::vector<float> in(n_in), out(n_out);
  for (size_t i = 0; i < n_in; ++i)
    in[i] = input_at(i, base);
  compute(in.data(), n_in, out.data(), n_out);
  return out;
}

// What the proxy does and saw.
struct ProxyPlan {
  double timeout_s = 60;
  const std::atomic<bool>* abort = nullptr;
  int hold_ms = 100;         // between seeing the input and releasing (the ring's time)
  bool write_result = true;  // compute() into out(); false: release only (a failed call)
};
struct ProxyRun {
  Status input_status;
  std::vector<float> input;  // in() as the proxy saw it once wait_input returned
  std::atomic<bool> input_seen{false};
  std::atomic<bool> released{false};
  uint64_t proxy_calls_delta = 0;
};

// The proxy: a thread named "sccl-proxy" (CUDAEMU_RELEASERS' prefix; comm.cc names its own
// alike), marked as a proxy (ProxyThreadMark), that runs `calls` in order. No CUDA call here.
std::thread start_proxy(std::vector<std::shared_ptr<StagedCall>> calls, ProxyPlan plan,
                        std::vector<std::unique_ptr<ProxyRun>>* runs) {
  runs->clear();
  for (size_t k = 0; k < calls.size(); ++k)
    runs->push_back(std::make_unique<ProxyRun>());
  std::vector<ProxyRun*> rs;
  for (auto& r : *runs)
    rs.push_back(r.get());
  return std::thread([calls = std::move(calls), plan, rs] {
    pthread_setname_np(pthread_self(), "sccl-proxy");
    ProxyThreadMark mark;
    const uint64_t calls_before = cuda_device_runtime().proxy_calls();
    for (size_t k = 0; k < calls.size(); ++k) {
      StagedCall& c = *calls[k];
      ProxyRun& r = *rs[k];
      r.input_status = c.wait_input(plan.timeout_s, plan.abort);
      if (r.input_status.ok()) {
        const float* in = reinterpret_cast<const float*>(c.in());
        r.input.assign(in, in + c.in_bytes() / sizeof(float));
      }
      r.input_seen = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(plan.hold_ms));
      if (r.input_status.ok() && plan.write_result) {
        compute(reinterpret_cast<const float*>(c.in()), c.in_bytes() / sizeof(float),
                reinterpret_cast<float*>(c.out()), c.out_bytes() / sizeof(float));
      }
      c.release();
      r.released = true;
      r.proxy_calls_delta = cuda_device_runtime().proxy_calls() - calls_before;
    }
  });
}

// Waits for `s` with a bound: true when it completed.
bool finishes(cudaStream_t s, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

PoolFigures staging_figures() {
  return process_pool_figures(PoolKind::kPinnedStaging, 0);
}

// Each test: device 0, the flag mechanism it names, the test kernels loaded (a first launch
// under lazy loading synchronizes the device).
class StagingBase {
 protected:
  static void set_up(bool flag_kernels) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(gputest::preload_kernels(), cudaSuccess);
    use_flag_kernels_for_test(flag_kernels);
    std::string how;
    const Status st = cuda_device_runtime().prepare(0, &how);
    ASSERT_TRUE(st.ok()) << st.to_string();
    // Kernels when asked; memory operations otherwise wherever the driver has them.
    if (flag_kernels) {
      EXPECT_NE(how.find("kernels"), std::string::npos) << how;
    }
  }
  static void tear_down() { use_flag_kernels_for_test(false); }
};

// ---- the staged call, end to end on one stream ------------------------------------------------

struct OrderCase {
  bool flag_kernels;
  Mem mem;
  bool scatter;  // a ReduceScatter's shape: the result half of the input
};

class Staged : public ::testing::TestWithParam<OrderCase>, protected StagingBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    set_up(GetParam().flag_kernels);
  }
  void TearDown() override { tear_down(); }
};

// A slow kernel queued before the call writes the input; the call returns before the stream got
// there (the proxy has not even seen the input); the proxy sees exactly the kernel's input; a
// kernel and a copy queued after the call see the proxy's result; the block is free afterwards.
TEST_P(Staged, ResultComesBackInStreamOrder) {
  const OrderCase p = GetParam();
  Watchdog dog(120, "the staged call");
  const size_t n = 262144 + 5;
  const size_t n_in = p.scatter ? 2 * n : n;
  const float base = 3;
  Buf x(n_in * sizeof(float), p.mem), y(n * sizeof(float), p.mem);
  double* dsum = nullptr;
  float* host_y = nullptr;
  CUDA_ASSERT(cudaMalloc(reinterpret_cast<void**>(&dsum), sizeof(double)));
  CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&host_y), n * sizeof(float)));
  cudaStream_t s;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // NaN until the kernel (x) and the call (y) write them.
  if (p.mem == Mem::kDevice) {
    CUDA_ASSERT(cudaMemset(x.p, 0xff, n_in * sizeof(float)));
    CUDA_ASSERT(cudaMemset(y.p, 0xff, n * sizeof(float)));
  } else {
    std::memset(x.p, 0xff, n_in * sizeof(float));
    std::memset(y.p, 0xff, n * sizeof(float));
  }
  CUDA_ASSERT(cudaDeviceSynchronize());
  {
    DeviceStager stager(0);
    ASSERT_TRUE(stager.prepare().ok());
    CUDA_ASSERT(gputest::fill_after_delay(x.f(), n_in, base, 200, s));
    std::shared_ptr<StagedCall> c;
    Status st = stager.stage(n_in * sizeof(float), n * sizeof(float), &c);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_GE(stager.pinned_bytes(), (n_in + n) * sizeof(float));
    std::vector<std::unique_ptr<ProxyRun>> runs;
    std::thread proxy = start_proxy({c}, ProxyPlan{}, &runs);
    st = stager.enqueue(s, x.p, y.p, c);
    // Nothing of the call was waited for: the proxy had not released it yet.
    const bool returned_early = !runs[0]->released.load();
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(returned_early) << "enqueue waited for the stream";
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT_EQ(stager.in_flight(), 1u);
    CUDA_ASSERT(gputest::sum_to(y.f(), n, dsum, s));
    CUDA_ASSERT(cudaMemcpyAsync(host_y, y.p, n * sizeof(float), cudaMemcpyDefault, s));
    EXPECT_TRUE(finishes(s, 60)) << "the stream never completed";
    proxy.join();
    const ProxyRun& r = *runs[0];
    ASSERT_TRUE(r.input_status.ok()) << r.input_status.to_string();
    EXPECT_EQ(r.proxy_calls_delta, 0u) << "a device runtime call on the proxy thread";
    // The stream copied the input only after the kernel before the call wrote it.
    size_t bad_in = 0;
    for (size_t i = 0; i < n_in; ++i)
      bad_in += r.input[i] != input_at(i, base);
    EXPECT_EQ(bad_in, 0u) << "the proxy saw an input the kernel queued before had not written";
    // The result came back, and the work after the call saw it.
    const std::vector<float> want = expected(n_in, n, base);
    size_t bad_out = 0;
    double want_sum = 0;
    for (size_t i = 0; i < n; ++i) {
      bad_out += host_y[i] != want[i];
      want_sum += want[i];
    }
    EXPECT_EQ(bad_out, 0u) << "the result was not copied back before the work after the call";
    double got_sum = 0;
    CUDA_ASSERT(cudaMemcpy(&got_sum, dsum, sizeof got_sum, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_sum, want_sum);
    EXPECT_TRUE(c->finished());
    EXPECT_EQ(stager.in_flight(), 0u);
  }
  cudaFree(dsum);
  cudaFreeHost(host_y);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(
    Flags, Staged,
    ::testing::Values(OrderCase{false, Mem::kDevice, false}, OrderCase{true, Mem::kDevice, false},
                      OrderCase{false, Mem::kPinned, false}, OrderCase{true, Mem::kPinned, false},
                      OrderCase{false, Mem::kDevice, true}, OrderCase{true, Mem::kPinned, true}),
    [](const ::testing::TestParamInfo<OrderCase>& i) {
      return std::string(i.param.flag_kernels ? "kernels" : "memops") + "_" +
             (i.param.mem == Mem::kDevice ? "device" : "pinned") + "_" +
             (i.param.scatter ? "reducescatter" : "allreduce");
    });

// ---- staging blocks: reuse once copied back ------------------------------------------------

class StagingBlocks : public ::testing::TestWithParam<bool>, protected StagingBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    set_up(GetParam());
  }
  void TearDown() override { tear_down(); }
};

// Two calls in flight on one stream hold two blocks; once the stream copied both back, a third
// call reuses a kept block (nothing allocated), and the stager holds that one only.
TEST_P(StagingBlocks, AreReusedOnlyAfterTheStreamCopiedBack) {
  Watchdog dog(120, "the staged calls");
  const size_t n = 100003;
  const size_t bytes = n * sizeof(float);
  Buf x(bytes, Mem::kDevice), y1(bytes, Mem::kDevice), y2(bytes, Mem::kDevice),
      y3(bytes, Mem::kDevice);
  cudaStream_t s;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<float> h1(n), h3(n);
  {
    DeviceStager stager(0);
    ASSERT_TRUE(stager.prepare().ok());
    CUDA_ASSERT(gputest::fill_after_delay(x.f(), n, 1, 300, s));
    std::shared_ptr<StagedCall> c1, c2, c3;
    ASSERT_TRUE(stager.stage(bytes, bytes, &c1).ok());
    ASSERT_TRUE(stager.stage(bytes, bytes, &c2).ok());
    // A block the stream may still copy into is never handed out again.
    EXPECT_NE(c1->in(), c2->in());
    EXPECT_GE(stager.pinned_bytes(), 4 * bytes);
    std::vector<std::unique_ptr<ProxyRun>> runs;
    std::thread proxy = start_proxy({c1, c2}, ProxyPlan{}, &runs);
    ASSERT_TRUE(stager.enqueue(s, x.p, y1.p, c1).ok());
    ASSERT_TRUE(stager.enqueue(s, y1.p, y2.p, c2).ok());  // the second call's input: the first's
    EXPECT_EQ(stager.in_flight(), 2u);
    EXPECT_FALSE(c1->finished());
    EXPECT_TRUE(finishes(s, 60));
    proxy.join();
    EXPECT_TRUE(c1->finished());
    EXPECT_TRUE(c2->finished());
    EXPECT_EQ(stager.in_flight(), 0u);
    const PoolFigures before = staging_figures();
    ASSERT_TRUE(stager.stage(bytes, bytes, &c3).ok());
    const PoolFigures after = staging_figures();
    EXPECT_EQ(after.reuses, before.reuses + 1) << "a finished call's block was not reused";
    EXPECT_EQ(after.held_bytes, before.held_bytes) << "a block was allocated";
    EXPECT_LT(stager.pinned_bytes(), 3 * bytes) << "finished blocks were not given back";
    // The reused block works like a fresh one: its flags are this call's.
    std::thread proxy3 = start_proxy({c3}, ProxyPlan{}, &runs);
    ASSERT_TRUE(stager.enqueue(s, y2.p, y3.p, c3).ok());
    EXPECT_TRUE(finishes(s, 60));
    proxy3.join();
    EXPECT_TRUE(c3->finished());
    CUDA_ASSERT(cudaMemcpy(h1.data(), y1.p, bytes, cudaMemcpyDeviceToHost));
    CUDA_ASSERT(cudaMemcpy(h3.data(), y3.p, bytes, cudaMemcpyDeviceToHost));
  }
  // y1 = 2x+1, y2 = 2y1+1, y3 = 2y2+1 = 8x+7.
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float x0 = input_at(i, 1);
    bad += h1[i] != 2 * x0 + 1;
    bad += h3[i] != 8 * x0 + 7;
  }
  EXPECT_EQ(bad, 0u);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Flags, StagingBlocks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "kernels" : "memops");
                         });

// ---- chunks (docs/cuda.md, "Chunks") -----------------------------------------------------------

class Chunks : public ::testing::TestWithParam<bool>, protected StagingBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    set_up(GetParam());
  }
  void TearDown() override { tear_down(); }
};

// 4 MiB in 16 chunks each way, a slow kernel before the call writing the input, the stream
// copying the input in from the last chunk to the first. The proxy (no CUDA call) reads chunk k
// only once need_input says the stream copied it, and sees the kernel's values there; it makes
// the result's chunk 0 final, then waits until the stream has copied that chunk back into the
// caller's (pinned) buffer before it makes any other chunk final: the copy back of one chunk
// runs while the proxy still holds the others. The work after the call sees every chunk.
TEST_P(Chunks, EachIsReadAfterItsFlagAndCopiedBackBeforeTheLastIsDone) {
  Watchdog dog(120, "the chunked call");
  constexpr size_t n = size_t(1) << 20;
  constexpr size_t bytes = n * sizeof(float);
  constexpr size_t chunk = bytes / 16;
  const float base = 5;
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kPinned);
  std::memset(y.p, 0xff, bytes);
  cudaStream_t s;
  CUDA_ASSERT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* host_y = nullptr;
  CUDA_ASSERT(cudaMallocHost(reinterpret_cast<void**>(&host_y), bytes));
  CUDA_ASSERT(cudaMemset(x.p, 0xff, bytes));
  CUDA_ASSERT(cudaDeviceSynchronize());
  {
    DeviceStager stager(0);
    ASSERT_TRUE(stager.prepare().ok());
    CUDA_ASSERT(gputest::fill_after_delay(x.f(), n, base, 200, s));
    StagingChunks ch;
    ch.in_chunk = ch.out_chunk = chunk;
    for (int k = 15; k >= 0; --k)
      ch.in_order.push_back(k);
    std::shared_ptr<StagedCall> c;
    ASSERT_TRUE(stager.stage(bytes, bytes, &c, true, ch).ok());
    ASSERT_EQ(c->in_chunks(), 16);
    ASSERT_EQ(c->out_chunks(), 16);
    std::atomic<size_t> bad_in{0};
    std::atomic<bool> first_back{false};
    std::atomic<uint64_t> proxy_calls{0};
    Status proxy_st;
    std::thread proxy([&] {
      pthread_setname_np(pthread_self(), "sccl-proxy");
      ProxyThreadMark mark;
      const uint64_t before = cuda_device_runtime().proxy_calls();
      StagedCall& call = *c;
      Status st = call.wait_started(60, nullptr);
      call.bound_waits(60, nullptr);
      const float* in = reinterpret_cast<const float*>(call.in());
      float* out = reinterpret_cast<float*>(call.out());
      const size_t per = chunk / sizeof(float);
      for (int k = 0; k < 16 && st.ok(); ++k) {
        st = call.need_input(k * chunk, (k + 1) * chunk);
        for (size_t i = k * per; st.ok() && i < (k + 1) * per; ++i) {
          bad_in += in[i] != input_at(i, base);
          out[i] = 2 * in[i] + 1;
        }
        if (k == 0 && st.ok()) {
          call.output_final(0, chunk);
          // Host memory only: the stream's copy of chunk 0 into the pinned result.
          const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          const volatile float* yv = y.f();
          while (yv[per - 1] != 2 * input_at(per - 1, base) + 1 &&
                 std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::microseconds(100));
          first_back = yv[per - 1] == 2 * input_at(per - 1, base) + 1;
        }
      }
      for (int k = 1; k < 16 && st.ok(); ++k)
        call.output_final(k * chunk, (k + 1) * chunk);
      call.release();
      proxy_st = st;
      proxy_calls = cuda_device_runtime().proxy_calls() - before;
    });
    ASSERT_TRUE(stager.enqueue(s, x.p, y.p, c).ok());
    CUDA_ASSERT(cudaMemcpyAsync(host_y, y.p, bytes, cudaMemcpyDefault, s));
    EXPECT_TRUE(finishes(s, 60)) << "the stream never completed";
    proxy.join();
    EXPECT_TRUE(proxy_st.ok()) << proxy_st.to_string();
    EXPECT_EQ(proxy_calls.load(), 0u) << "a device runtime call on the proxy thread";
    EXPECT_EQ(bad_in.load(), 0u) << "a chunk was read before the stream copied the kernel's input";
    EXPECT_TRUE(first_back.load()) << "chunk 0 did not come back before the others were done";
    size_t bad_out = 0;
    for (size_t i = 0; i < n; ++i)
      bad_out += host_y[i] != 2 * input_at(i, base) + 1;
    EXPECT_EQ(bad_out, 0u);
    EXPECT_TRUE(c->finished());
  }
  cudaFreeHost(host_y);
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Flags, Chunks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "kernels" : "memops");
                         });

// ---- cancel paths ----------------------------------------------------------------------------

// The CUDA runtime, with the n-th call of one stream operation failing (as a launch or copy
// would): the cancel paths of DeviceStager::enqueue on a real stream.
class FailingRuntime final : public DeviceRuntime {
 public:
  enum class Op { kCopy, kWrite, kWait };
  FailingRuntime(Op op, int nth) : op_(op), nth_(nth) {}
  Status prepare(int device, std::string* how) override {
    return cuda_device_runtime().prepare(device, how);
  }
  void* alloc_staging(int device, size_t bytes) override {
    return cuda_device_runtime().alloc_staging(device, bytes);
  }
  void free_staging(int device, void* p) override { cuda_device_runtime().free_staging(device, p); }
  Status copy_async(int device, void* dst, const void* src, size_t bytes, void* stream) override {
    if (fails(Op::kCopy)) return Status(Code::kUnhandledCudaError, "injected copy failure");
    return cuda_device_runtime().copy_async(device, dst, src, bytes, stream);
  }
  Status write_flag(int device, uint32_t* flag, uint32_t value, void* stream) override {
    if (fails(Op::kWrite)) return Status(Code::kUnhandledCudaError, "injected write failure");
    return cuda_device_runtime().write_flag(device, flag, value, stream);
  }
  Status wait_flag(int device, const uint32_t* flag, uint32_t value, void* stream) override {
    if (fails(Op::kWait)) return Status(Code::kUnhandledCudaError, "injected wait failure");
    return cuda_device_runtime().wait_flag(device, flag, value, stream);
  }

 private:
  bool fails(Op op) { return op == op_ && ++seen_ == nth_; }
  const Op op_;
  const int nth_;
  int seen_ = 0;
};

class StagingCancel : public ::testing::Test, protected StagingBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    set_up(false);
    CUDA_ASSERT(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    set_device_runtime_for_test(nullptr);
    if (s_ != nullptr) cudaStreamDestroy(s_);
    tear_down();
  }
  cudaStream_t s_ = nullptr;
};

// The input copy cannot be enqueued: nothing is on the stream, the proxy's wait gives the error
// at once (the call is not run), and the block is free for the next call.
TEST_F(StagingCancel, BeforeTheInputCopyTheProxyDoesNotRunAndTheBlockIsFree) {
  Watchdog dog(60, "the cancelled call");
  const size_t bytes = 4096 * sizeof(float);
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kDevice);
  FailingRuntime failing(FailingRuntime::Op::kCopy, 1);
  DeviceStager stager(0);
  ASSERT_TRUE(stager.prepare().ok());
  std::shared_ptr<StagedCall> c;
  ASSERT_TRUE(stager.stage(bytes, bytes, &c).ok());
  set_device_runtime_for_test(&failing);
  const Status st = stager.enqueue(s_, x.p, y.p, c);
  set_device_runtime_for_test(nullptr);
  EXPECT_EQ(st.code(), Code::kUnhandledCudaError);
  const auto t0 = std::chrono::steady_clock::now();
  const Status w = c->wait_input(30, nullptr);
  EXPECT_EQ(w.code(), Code::kUnhandledCudaError);
  EXPECT_EQ(w.message(), "injected copy failure");
  EXPECT_LT(ms_since(t0), 5000);
  EXPECT_TRUE(c->finished());
  EXPECT_EQ(stager.in_flight(), 0u);
  EXPECT_EQ(cudaStreamQuery(s_), cudaSuccess) << "something was left on the stream";
  const PoolFigures before = staging_figures();
  std::shared_ptr<StagedCall> next;
  ASSERT_TRUE(stager.stage(bytes, bytes, &next).ok());
  EXPECT_EQ(staging_figures().reuses, before.reuses + 1);
  EXPECT_EQ(next->in(), c->in()) << "the cancelled call's block was not given back";
  // The next call on the block runs normally.
  std::vector<std::unique_ptr<ProxyRun>> runs;
  std::thread proxy = start_proxy({next}, ProxyPlan{}, &runs);
  ASSERT_TRUE(stager.enqueue(s_, x.p, y.p, next).ok());
  EXPECT_TRUE(finishes(s_, 60));
  proxy.join();
  EXPECT_TRUE(next->finished());
}

// The input copy was enqueued but the ready flag could not be: the call is cancelled (the proxy
// does not run it) and its block, which the copy may still write, is never reused: the stager
// abandons it when it goes.
TEST_F(StagingCancel, AfterTheInputCopyTheBlockIsAbandoned) {
  Watchdog dog(60, "the cancelled call");
  const size_t bytes = 8192 * sizeof(float);
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kDevice);
  FailingRuntime failing(FailingRuntime::Op::kWrite, 1);
  const PoolFigures before = staging_figures();
  void* block = nullptr;
  {
    DeviceStager stager(0);
    stager.set_timeout(0.2);
    ASSERT_TRUE(stager.prepare().ok());
    std::shared_ptr<StagedCall> c;
    ASSERT_TRUE(stager.stage(bytes, bytes, &c).ok());
    block = c->in();
    set_device_runtime_for_test(&failing);
    const Status st = stager.enqueue(s_, x.p, y.p, c);
    set_device_runtime_for_test(nullptr);
    EXPECT_EQ(st.message(), "injected write failure");
    EXPECT_EQ(c->wait_input(30, nullptr).message(), "injected write failure");
    EXPECT_TRUE(finishes(s_, 30));  // only the copy was queued
    EXPECT_FALSE(c->finished());
    EXPECT_EQ(stager.in_flight(), 1u);
    // Not handed out again while this stager lives.
    std::shared_ptr<StagedCall> other;
    ASSERT_TRUE(stager.stage(bytes, bytes, &other).ok());
    EXPECT_NE(other->in(), block);
    std::vector<std::unique_ptr<ProxyRun>> runs;
    std::thread proxy = start_proxy({other}, ProxyPlan{}, &runs);
    ASSERT_TRUE(stager.enqueue(s_, x.p, y.p, other).ok());
    EXPECT_TRUE(finishes(s_, 30));
    proxy.join();
    EXPECT_TRUE(other->finished());
  }
  // Abandoned: still counted as leased, never kept for reuse.
  const PoolFigures after = staging_figures();
  EXPECT_GE(after.leased_bytes, before.leased_bytes + bytes);
  DeviceStager again(0);
  std::shared_ptr<StagedCall> c2;
  ASSERT_TRUE(again.stage(bytes, bytes, &c2).ok());
  EXPECT_NE(c2->in(), block) << "an abandoned block was reused";
  std::vector<std::unique_ptr<ProxyRun>> runs;
  std::thread proxy = start_proxy({c2}, ProxyPlan{}, &runs);
  ASSERT_TRUE(again.enqueue(s_, x.p, y.p, c2).ok());
  EXPECT_TRUE(finishes(s_, 30));
  proxy.join();
}

// The wait for the proxy could not be enqueued after the ready flag was: the proxy runs the call
// (the other ranks do), the error is the caller's, and the stream is not held.
TEST_F(StagingCancel, AfterTheReadyFlagTheProxyStillRuns) {
  Watchdog dog(60, "the failed call");
  const size_t bytes = 4096 * sizeof(float);
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kDevice);
  FailingRuntime failing(FailingRuntime::Op::kWait, 1);
  DeviceStager stager(0);
  stager.set_timeout(0.2);
  ASSERT_TRUE(stager.prepare().ok());
  CUDA_ASSERT(gputest::fill_after_delay(x.f(), 4096, 5, 0, s_));
  std::shared_ptr<StagedCall> c;
  ASSERT_TRUE(stager.stage(bytes, bytes, &c).ok());
  std::vector<std::unique_ptr<ProxyRun>> runs;
  std::thread proxy = start_proxy({c}, ProxyPlan{}, &runs);
  set_device_runtime_for_test(&failing);
  const Status st = stager.enqueue(s_, x.p, y.p, c);
  set_device_runtime_for_test(nullptr);
  EXPECT_EQ(st.message(), "injected wait failure");
  proxy.join();
  EXPECT_TRUE(runs[0]->input_status.ok()) << runs[0]->input_status.to_string();
  ASSERT_EQ(runs[0]->input.size(), 4096u);
  EXPECT_EQ(runs[0]->input[4095], input_at(4095, 5));
  EXPECT_TRUE(finishes(s_, 30));
}

// The proxy gives up waiting (SKETCHCCL_TIMEOUT, or abort) while work before the call still
// holds the stream, and releases without a result: the stream goes on through the call and
// completes; the block is free once it did.
TEST_F(StagingCancel, ProxyGivingUpReleasesTheStream) {
  Watchdog dog(60, "the abandoned call");
  const size_t bytes = 4096 * sizeof(float);
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kDevice);
  DeviceStager stager(0);
  ASSERT_TRUE(stager.prepare().ok());
  for (int by_abort = 0; by_abort < 2; ++by_abort) {
    SCOPED_TRACE(by_abort ? "abort" : "timeout");
    CUDA_ASSERT(gputest::spin_ms(600, s_));
    std::shared_ptr<StagedCall> c;
    ASSERT_TRUE(stager.stage(bytes, bytes, &c).ok());
    std::atomic<bool> abort{false};
    ProxyPlan plan;
    plan.timeout_s = by_abort ? 60 : 0.1;
    plan.abort = &abort;
    plan.hold_ms = 0;
    plan.write_result = false;
    std::vector<std::unique_ptr<ProxyRun>> runs;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread proxy = start_proxy({c}, plan, &runs);
    ASSERT_TRUE(stager.enqueue(s_, x.p, y.p, c).ok());
    if (by_abort) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      abort = true;
    }
    proxy.join();
    EXPECT_EQ(runs[0]->input_status.code(), Code::kRemoteError)
        << runs[0]->input_status.to_string();
    EXPECT_LT(ms_since(t0), 550) << "the proxy waited for the stream";
    EXPECT_TRUE(finishes(s_, 30)) << "the released stream stayed held";
    EXPECT_TRUE(c->finished());
    EXPECT_EQ(stager.in_flight(), 0u);
  }
}

// ---- the hazard: the application's CUDA calls while the stream waits on the proxy ------------

struct HazardCase {
  bool flag_kernels;
  bool greatest_priority;  // the application's streams at the device's greatest priority
};

class Hazard : public ::testing::TestWithParam<HazardCase>, protected StagingBase {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    set_up(GetParam().flag_kernels);
  }
  void TearDown() override { tear_down(); }
};

// While a staged call's stream waits for the proxy, another application thread frees device
// memory (cudaFree synchronizes the device: it waits for the held stream), copies device memory
// to pageable host memory (the legacy stream: it waits for the held blocking stream), allocates
// and frees pinned memory, and runs a kernel on a stream of its own. The proxy releases after
// ~200 ms without a CUDA call, so every one of those returns, and the result is right. On a GPU
// that is what happens; the emulator's strict mode (CUDAEMU_RELEASERS=sccl-proxy) checks that no
// CUDA call comes from the proxy while the stream waits. Also run with one hardware queue
// (gpu_staging_one_queue: CUDA_DEVICE_MAX_CONNECTIONS=1).
TEST_P(Hazard, OtherThreadsCudaCallsWhileTheStreamWaitsOnTheProxyComplete) {
  const HazardCase p = GetParam();
  Watchdog dog(120, "the application's CUDA calls during a staged call");
  int least = 0, greatest = 0;
  CUDA_ASSERT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int prio = p.greatest_priority ? greatest : least;
  // Blocking streams: the legacy stream (the pageable copy's) waits for them.
  cudaStream_t s, other;
  CUDA_ASSERT(cudaStreamCreateWithPriority(&s, cudaStreamDefault, prio));
  CUDA_ASSERT(cudaStreamCreateWithPriority(&other, cudaStreamDefault, prio));
  const size_t n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  Buf x(bytes, Mem::kDevice), y(bytes, Mem::kDevice), src(1 << 20, Mem::kDevice);
  CUDA_ASSERT(cudaMemset(src.p, 0x5a, 1 << 20));
  CUDA_ASSERT(cudaDeviceSynchronize());
  std::vector<float> host_y(n);
  {
    DeviceStager stager(0);
    ASSERT_TRUE(stager.prepare().ok());
    CUDA_ASSERT(gputest::fill_after_delay(x.f(), n, 2, 50, s));
    std::shared_ptr<StagedCall> c;
    ASSERT_TRUE(stager.stage(bytes, bytes, &c).ok());
    ProxyPlan plan;
    plan.hold_ms = 200;
    std::vector<std::unique_ptr<ProxyRun>> runs;
    std::thread proxy = start_proxy({c}, plan, &runs);
    ASSERT_TRUE(stager.enqueue(s, x.p, y.p, c).ok());

    struct Result {
      cudaError_t malloc_free = cudaErrorUnknown, copy = cudaErrorUnknown,
                  host_alloc = cudaErrorUnknown, kernel = cudaErrorUnknown;
      bool started_while_held = false;
      bool copy_right = false;
    } res;
    std::thread app([&] {
      pthread_setname_np(pthread_self(), "app-thread");
      // The stream is past its input copy and waits for the proxy.
      while (!runs[0]->input_seen.load())
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      res.started_while_held = !runs[0]->released.load();
      void* big = nullptr;
      res.malloc_free = cudaMalloc(&big, size_t(64) << 20);
      if (res.malloc_free == cudaSuccess) res.malloc_free = cudaFree(big);
      std::vector<uint8_t> pageable(1 << 20);
      res.copy = cudaMemcpy(pageable.data(), src.p, pageable.size(), cudaMemcpyDeviceToHost);
      res.copy_right = pageable[0] == 0x5a && pageable.back() == 0x5a;
      void* pinned = nullptr;
      res.host_alloc = cudaHostAlloc(&pinned, size_t(4) << 20, cudaHostAllocDefault);
      if (res.host_alloc == cudaSuccess) res.host_alloc = cudaFreeHost(pinned);
      res.kernel = gputest::spin_ms(2, other);
      if (res.kernel == cudaSuccess) res.kernel = cudaStreamSynchronize(other);
    });
    app.join();
    proxy.join();
    EXPECT_TRUE(res.started_while_held) << "the proxy released before the calls began";
    EXPECT_EQ(res.malloc_free, cudaSuccess) << cudaGetErrorString(res.malloc_free);
    EXPECT_EQ(res.copy, cudaSuccess) << cudaGetErrorString(res.copy);
    EXPECT_TRUE(res.copy_right);
    EXPECT_EQ(res.host_alloc, cudaSuccess) << cudaGetErrorString(res.host_alloc);
    EXPECT_EQ(res.kernel, cudaSuccess) << cudaGetErrorString(res.kernel);
    EXPECT_TRUE(finishes(s, 60));
    ASSERT_TRUE(runs[0]->input_status.ok()) << runs[0]->input_status.to_string();
    EXPECT_EQ(runs[0]->proxy_calls_delta, 0u);
    CUDA_ASSERT(cudaMemcpy(host_y.data(), y.p, bytes, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(c->finished());
  }
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    bad += host_y[i] != 2 * input_at(i, 2) + 1;
  EXPECT_EQ(bad, 0u);
  cudaStreamDestroy(s);
  cudaStreamDestroy(other);
}

INSTANTIATE_TEST_SUITE_P(Flags, Hazard,
                         ::testing::Values(HazardCase{false, false}, HazardCase{true, false},
                                           HazardCase{false, true}, HazardCase{true, true}),
                         [](const ::testing::TestParamInfo<HazardCase>& i) {
                           return std::string(i.param.flag_kernels ? "kernels" : "memops") +
                                  (i.param.greatest_priority ? "_greatest_priority" : "");
                         });

}  // namespace
}  // namespace sketchccl::backend
