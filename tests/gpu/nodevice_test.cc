// The CUDA build's checks that need no device (suite 'unit' and 'gpu'): the CUDA queries and
// the device-path rule (driver, CUDA_DEVICE_MAX_CONNECTIONS), the kernel preload, the stream gate's
// marker and release hook, and the host backend's error feedback.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/codec.h"
#include "kernels/convert.h"
#include "kernels/error_feedback.h"
#include "src/backend/backend.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/kernel_preload.h"
#include "src/backend/cuda/stream_gate.h"
#include "src/backend/cuda_probe.h"
#include "src/backend/cuda_query.h"
#include "src/backend/warm_up.h"
#include "src/coll/work.h"
#include "tests/gpu/ef_reference.h"
#include "tests/gpu/have_device.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::backend {
namespace {

using gpu_ref::decoded_with_non_finite;
using gpu_ref::reference_ef_update;
using gpu_ref::same_bits;
using gpu_ref::user_bytes;
using kernels::ElemType;
using kernels::testing::Dist;
using kernels::testing::make_data;

using sketchccl::gpu_test::have_device;

TEST(CudaQuery, BackendExactlyWhenADeviceIsVisible) {
  EXPECT_EQ(has_cuda_backend(), have_device());
  if (!have_device()) {
    EXPECT_EQ(current_cuda_device(), 0);
    std::unique_ptr<CudaBackend> b;
    EXPECT_EQ(make_cuda_backend(0, &b).code(), Code::kUnhandledCudaError);
    std::unique_ptr<CudaStreamGate> g;
    EXPECT_FALSE(CudaStreamGate::create(0, CudaStreamGate::Mechanism::kAuto, &g).ok());
    std::unique_ptr<StreamGate> sg;
    EXPECT_EQ(make_stream_gate(MemoryType::kDevice, 0, &sg).code(), Code::kUnhandledCudaError);
    std::unique_ptr<Backend> be;
    EXPECT_EQ(make_backend(MemoryType::kDevice, 0, &be).code(), Code::kUnhandledCudaError);
  }
}

// The stream gate is released from Work's completion callback: it must run exactly once
// whether the work ran, failed, or was dropped (abort completes queued work from another
// thread), and after the status is visible.
TEST(WorkOnComplete, RunsExactlyOnceHoweverTheWorkEnds) {
  int calls = 0;
  coll::Work ran([] { return Status(Code::kRemoteError, "peer gone"); });
  ran.set_on_complete([&] {
    ++calls;
    EXPECT_TRUE(ran.done());
  });
  ran.run();
  ran.complete(Status::Ok());  // a late abort
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ran.wait().code(), Code::kRemoteError);

  std::atomic<int> dropped_calls{0};
  bool fn_ran = false;
  coll::Work dropped([&] {
    fn_ran = true;
    return Status::Ok();
  });
  dropped.set_on_complete([&] { dropped_calls++; });
  std::thread aborter([&] { dropped.complete(Status(Code::kRemoteError, "aborted")); });
  aborter.join();
  EXPECT_EQ(dropped_calls.load(), 1);
  EXPECT_FALSE(fn_ran);
  dropped.complete(Status::Ok());  // completing again changes nothing
  EXPECT_EQ(dropped_calls.load(), 1);
  EXPECT_EQ(dropped.wait().code(), Code::kRemoteError);
}

TEST(ErrorFeedback, HostBackendKeepsTheEnginesArithmetic) {
  auto cpu = make_host_backend();
  const size_t n = 70001;
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBf16}) {
    const std::vector<uint8_t> x = user_bytes(make_data(Dist::kLaplace, n, 11), t);
    std::vector<float> r0 = make_data(Dist::kGauss, n, 12);
    std::unique_ptr<F32Array> r, comp;
    ASSERT_TRUE(cpu->alloc_f32(n, &r).ok());
    ASSERT_TRUE(cpu->alloc_f32(n, &comp).ok());
    ASSERT_EQ(r->size(), n);
    EXPECT_EQ(std::vector<float>(r->data(), r->data() + n), std::vector<float>(n, 0.0f));
    std::memcpy(r->data(), r0.data(), n * sizeof(float));
    ASSERT_TRUE(cpu->ef_compensate(x.data(), t, n, r->data(), comp->data()).ok());
    std::vector<float> want(n);
    kernels::load_f32(x.data(), t, n, want.data());
    for (size_t i = 0; i < n; ++i)
      want[i] += r0[i];
    EXPECT_TRUE(same_bits(comp->data(), want.data(), n));

    const std::vector<float> c(comp->data(), comp->data() + n);
    const std::vector<float> in = make_data(Dist::kGauss, n, 13);
    const std::vector<float> out = decoded_with_non_finite(n, 14);
    for (const std::vector<float>* inp : {static_cast<const std::vector<float>*>(nullptr), &in}) {
      std::vector<float> ref(n);
      double ref_in = 0, ref_res = 0;
      reference_ef_update(c, inp, out, &ref, &ref_in, &ref_res);
      kernels::EfSums sums;
      ASSERT_TRUE(cpu->ef_update(c.data(), inp != nullptr ? inp->data() : nullptr, out.data(), n,
                                 r->data(), &sums)
                      .ok());
      EXPECT_TRUE(same_bits(r->data(), ref.data(), n));
      EXPECT_EQ(sums.input_sq, ref_in);
      EXPECT_EQ(sums.residual_sq, ref_res);
    }
  }
}

TEST(GateMarker, WaitEndsAtAbortAndAtTheTimeoutWithoutADevice) {
  GateMarker m;
  std::atomic<bool> abort{false};
  auto t0 = std::chrono::steady_clock::now();
  Status st = m.wait(0.1, &abort);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    abort.store(true);
  });
  EXPECT_EQ(m.wait(30, &abort).code(), Code::kRemoteError);
  t.join();
  GateMarker fired;
  std::thread f([&] { fired.fire(); });
  EXPECT_TRUE(fired.wait(30, nullptr).ok());
  f.join();
}

// A marker whose wait could not be enqueued: the proxy's wait gives the enqueue's error at once,
// whether the marker fired before or fires later (the stream is not held: the ring must not run).
TEST(GateMarker, CancelledWaitReturnsTheEnqueueErrorEvenWhenFired) {
  GateMarker m;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m.cancel(Status(Code::kUnhandledCudaError, "wait kernel launch failed"));
  });
  auto t0 = std::chrono::steady_clock::now();
  Status st = m.wait(30, nullptr);
  t.join();
  EXPECT_EQ(st.code(), Code::kUnhandledCudaError);
  EXPECT_EQ(st.message(), "wait kernel launch failed");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  GateMarker fired;
  fired.fire();
  fired.cancel(Status(Code::kUnhandledCudaError, "late"));
  EXPECT_EQ(fired.wait(30, nullptr).code(), Code::kUnhandledCudaError);
}

// ---- the device-path rule and the preload ---------------------------------------------------

TEST(DevicePath, OneHardwareQueueForwardsDeviceBuffers) {
  EXPECT_TRUE(max_connections_allow_device_path(nullptr));
  EXPECT_TRUE(max_connections_allow_device_path(""));
  EXPECT_TRUE(max_connections_allow_device_path("8"));
  EXPECT_TRUE(max_connections_allow_device_path("2"));
  EXPECT_TRUE(max_connections_allow_device_path("many"));  // CUDA ignores it too
  EXPECT_FALSE(max_connections_allow_device_path("1"));
  EXPECT_FALSE(max_connections_allow_device_path("0"));
}

TEST(DevicePath, DriverOlderThanTheRuntimeIsNamed) {
  CudaProbe p;
  p.compiled = true;
  p.runtime_version = 13000;
  p.driver_version = 12080;  // an R570 driver
  EXPECT_TRUE(p.driver_too_old());
  std::string m = p.driver_meaning();
  EXPECT_NE(m.find("too old"), std::string::npos) << m;
  EXPECT_NE(m.find("forwarded"), std::string::npos) << m;
  EXPECT_NE(m.find("12.8"), std::string::npos) << m;
  p.runtime_version = 12080;  // a 12.8 build on an R550 driver: minor-version compatibility
  p.driver_version = 12040;
  EXPECT_FALSE(p.driver_too_old());
  EXPECT_NE(p.driver_meaning().find("minor-version"), std::string::npos) << p.driver_meaning();
  p.insufficient_driver = true;  // unless CUDA itself refuses it
  EXPECT_TRUE(p.driver_too_old());
  p.insufficient_driver = false;
  p.runtime_version = 13000;
  p.driver_version = 13010;
  EXPECT_FALSE(p.driver_too_old());
  EXPECT_NE(p.driver_meaning().find("can run"), std::string::npos);
  p.driver_version = 0;  // no driver is not an old one
  EXPECT_FALSE(p.driver_too_old());
  EXPECT_NE(p.driver_meaning().find("no CUDA driver"), std::string::npos);
  p.compiled = false;
  EXPECT_FALSE(p.driver_too_old());
}

TEST(DevicePath, UsableExactlyWithADeviceANewEnoughDriverAndQueues) {
  const CudaProbe p = probe_cuda();
  EXPECT_EQ(p.runtime_version, CUDART_VERSION);  // the static runtime linked in
  const char* reason = nullptr;
  const bool usable = device_path_usable(&reason);
  ASSERT_NE(reason, nullptr);
  const bool want = has_cuda_backend() && !p.driver_too_old() &&
                    max_connections_allow_device_path(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  EXPECT_EQ(usable, want) << reason;
  if (!usable) {
    EXPECT_NE(std::string(reason), "");
  }
}

// Every kernel the backend launches is loaded when it is created: without a device the preload
// refuses instead of pretending; with one it loads and sizes the stack.
TEST(KernelPreload, LoadsEveryKernelOrRefuses) {
  if (!have_device()) {
    EXPECT_EQ(preload_kernels(0).code(), Code::kUnhandledCudaError);
  } else {
    PreloadReport r;
    ASSERT_TRUE(preload_kernels(0, &r).ok());
    EXPECT_GE(r.stack_limit, r.max_local_bytes);
  }
}

// The CUDA backend's warm-up sequence is valid: on the host backend, with the same input bytes,
// every call succeeds (so a device whose kernels work never fails its backend's creation).
TEST(KernelPreload, WarmUpSequenceSucceedsOnTheHostBackend) {
  auto host = make_host_backend();
  std::vector<float> x(kWarmUpElems), y(kWarmUpElems);
  std::memset(x.data(), 0x3c, x.size() * sizeof(float));
  const Status st = warm_up_backend(*host, x.data(), y.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace sketchccl::backend
