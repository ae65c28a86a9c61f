// Stream capture: CUDA's rules for potentially unsafe calls in the three capture modes.
#include "cudaemu/tests/selftest_util.h"

using namespace cudaemu_test;

namespace {

cudaError_t malloc_on_another_thread(cudaStreamCaptureMode thread_mode) {
  cudaError_t e = cudaSuccess;
  std::thread([&] {
    cudaStreamCaptureMode m = thread_mode;
    cudaThreadExchangeStreamCaptureMode(&m);
    void* d = nullptr;
    e = cudaMalloc(&d, 64);
    if (e == cudaSuccess) cudaFree(d);
    cudaGetLastError();
  }).join();
  return e;
}

TEST(cudaemu, GlobalCaptureIsInvalidatedByCudaMallocOnAnotherThread) {
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(malloc_on_another_thread(cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_OK(cudaStreamIsCapturing(s, &st));
  EXPECT_EQ(st, cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  cudaGetLastError();
  CUDA_OK(cudaStreamDestroy(s));
}

TEST(cudaemu, RelaxedCaptureOrRelaxedThreadAllowsCudaMalloc) {
  Words f;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // A relaxed capture does not forbid other threads anything.
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(malloc_on_another_thread(cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(write_value()(s, f.dev(0), 5, 0), CUDA_SUCCESS);
  EXPECT_TRUE(stays_false([&] { return f.get(0) != 0; }, 50));  // captured, not run
  cudaGraph_t g = nullptr;
  CUDA_OK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t x = nullptr;
  CUDA_OK(cudaGraphInstantiate(&x, g, 0));
  CUDA_OK(cudaGraphLaunch(x, s));
  CUDA_OK(cudaStreamSynchronize(s));
  EXPECT_EQ(f.get(0), 5u);
  CUDA_OK(cudaGraphExecDestroy(x));
  CUDA_OK(cudaGraphDestroy(g));
  // A global capture, but the other thread exchanged its mode to relaxed (as the backend does).
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(malloc_on_another_thread(cudaStreamCaptureModeRelaxed), cudaSuccess);
  // Thread-local capture: other threads in global mode are not affected either.
  CUDA_OK(cudaStreamEndCapture(s, &g));
  CUDA_OK(cudaGraphDestroy(g));
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  EXPECT_EQ(malloc_on_another_thread(cudaStreamCaptureModeGlobal), cudaSuccess);
  // ... but the capturing thread itself may not.
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, 16), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  CUDA_OK(cudaStreamDestroy(s));
}

TEST(cudaemu, CaptureRefusesSyncOfTheCapturingStreamAndImplicitLegacyWork) {
  Words f;
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreate(&s));  // blocking
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(write_value()(nullptr, f.dev(0), 1, 0), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  CUDA_OK(cudaStreamDestroy(s));
}

}  // namespace
