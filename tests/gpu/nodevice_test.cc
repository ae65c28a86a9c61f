// The CUDA build's checks that need no device (suite 'unit' and 'gpu'): the CUDA queries and
// the device-path rule (the driver's age; CUDA_DEVICE_MAX_CONNECTIONS no longer matters), the
// release hook of a staged call's work, and the host backend's error feedback.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/codec.h"
#include "kernels/convert.h"
#include "kernels/error_feedback.h"
#include "src/backend/backend.h"
#include "src/backend/cuda_probe.h"
#include "src/backend/cuda_query.h"
#include "src/backend/device_runtime.h"
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
    // The staged path's stream operations refuse instead of pretending.
    std::string how;
    EXPECT_EQ(cuda_device_runtime().prepare(0, &how).code(), Code::kUnhandledCudaError);
    EXPECT_EQ(cuda_device_runtime().alloc_staging(0, 4096), nullptr);
  }
}

// A staged call's stream is released from Work's completion callback: it must run exactly once
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

// ---- the device-path rule ------------------------------------------------------------------

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

TEST(DevicePath, UsableExactlyWithADeviceAndANewEnoughDriver) {
  const CudaProbe p = probe_cuda();
  EXPECT_EQ(p.runtime_version, CUDART_VERSION);  // the static runtime linked in
  const char* reason = nullptr;
  const bool usable = device_path_usable(&reason);
  ASSERT_NE(reason, nullptr);
  EXPECT_EQ(usable, has_cuda_backend() && !p.driver_too_old()) << reason;
  if (!usable) {
    EXPECT_NE(std::string(reason), "");
  }
}

// One hardware queue for every stream (CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron, NeMo) used to
// forward device buffers, because a stream held by the old gate blocked the codec work behind it
// on the same queue. A staged call queues nothing but its own copies and flags, on the caller's
// stream: the device path's rule no longer asks. The answer is made once per process, so a
// fresh process (a death-test child, re-executed) sets the variable before anything asks.
TEST(DevicePath, OneHardwareQueueNoLongerForwards) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
        const char* reason = nullptr;
        const bool usable = device_path_usable(&reason);
        const bool want = has_cuda_backend() && !probe_cuda().driver_too_old();
        std::fprintf(stderr, "usable=%d want=%d reason=%s\n", usable, want,
                     reason != nullptr ? reason : "(null)");
        std::exit(usable == want &&
                          (usable || std::string(reason).find("CONNECTIONS") == std::string::npos)
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "usable=");
}

}  // namespace
}  // namespace sketchccl::backend
