// The GPU path's first contact (docs/cuda.md): the first call of every codec on a held stream,
// CUDA_LAUNCH_BLOCKING=1 and CUDA_DEVICE_MAX_CONNECTIONS=1 (the call is staged on the caller's
// stream there too), a graph captured on another thread during taken-over calls, two
// communicators on two streams, abort while the stream waits for the call. Standalone, 2
// processes on device 0 (suite 'gpu'; every case skips without a device, and the binary then
// exits 77). Bit identity across ranks for every
// codec, s2 included, is api_test.cc's GpuAllReduce (identical output bytes on every rank).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"
#include "tests/gpu/gpu_test_main.h"
#include "tests/gpu/have_device.h"

namespace {

using sketchccl::testing::expect_agreement;
using sketchccl::testing::new_id_hex;

std::string g_worker;

using sketchccl::gpu_test::have_device;

std::vector<sketchccl::testing::RankOutput> run(const std::string& scenario, int nranks,
                                                std::vector<std::string> env,
                                                const std::vector<std::string>& args) {
  const std::string id = new_id_hex();
  env.insert(env.end(),
             {"SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_TRANSPORT=socket", "SKETCHCCL_MIN_BYTES=0",
              "SKETCHCCL_TIMEOUT=60", "SKETCHCCL_SLICE_BYTES=65536"});
  return sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        std::vector<std::string> argv = {g_worker, scenario, std::to_string(r),
                                         std::to_string(nranks), id};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      },
      env, 180);
}

class FirstContact : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

class FirstCall : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

// The communicator's first device call of each codec (its staging memory allocated, its flag
// operations prepared) while work before it still holds the stream.
TEST_P(FirstCall, OfEveryCodecUnderAHeldStreamCompletes) {
  expect_agreement(run("held_first", 2, {"SKETCHCCL_CODEC=" + GetParam()}, {"300007"}));
}

INSTANTIATE_TEST_SUITE_P(Codecs, FirstCall,
                         ::testing::Values("none", "bf16", "fp16", "q8", "q4", "q2", "casq2",
                                           "casq3", "casq4", "s2", "sparse"));

// Launches that return only when their work ended (also what compute-sanitizer and ncu do): the
// call is staged all the same (the proxy's work is queued before the stream operations, so the
// wait for it returns) and completes.
TEST_F(FirstContact, LaunchBlockingCallIsStagedAndCompletes) {
  expect_agreement(
      run("held_first", 2, {"CUDA_LAUNCH_BLOCKING=1", "SKETCHCCL_CODEC=q8"}, {"300007"}));
}

// One hardware queue for every stream (Megatron, NeMo): the call is staged as anywhere else and
// returns while its stream is still busy; it, the work after it and a second stream complete.
TEST_F(FirstContact, OneHardwareQueueCallIsStagedAndCompletes) {
  expect_agreement(run("second_stream", 2,
                       {"CUDA_DEVICE_MAX_CONNECTIONS=1", "SKETCHCCL_CODEC=none"}, {"200000"}));
}

// The cases below check exact sums: SKETCHCCL_CODEC=none (auto picks lossy codecs from a
// buffer's second call on).
TEST_F(FirstContact, GraphCapturedOnAnotherThreadDuringATakenOverCall) {
  expect_agreement(run("capture_thread", 2, {"SKETCHCCL_CODEC=none"}, {"200000"}));
}

// Staging blocks grow while earlier calls hold the stream (DDP queues bucket N+1 behind N).
TEST_F(FirstContact, LargerBucketsQueuedBehindAHeldStream) {
  expect_agreement(run("growing_buckets", 2, {"SKETCHCCL_CODEC=none"}, {"6250000"}));
}

TEST_F(FirstContact, TwoCommunicatorsOnTwoStreams) {
  expect_agreement(run("two_comms", 2, {"SKETCHCCL_CODEC=none"}, {"100000", new_id_hex()}));
}

TEST_F(FirstContact, AbortWhileTheStreamWaitsForTheCallReleasesIt) {
  expect_agreement(run("abort_held", 2, {}, {"100000"}));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_first_contact_worker [gtest flags]\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
