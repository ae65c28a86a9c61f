// The whole AllReduce on device buffers through nccl.h, standalone, 2 and 4 processes sharing
// one GPU over the socket transport (suite 'gpu'; skips without a device). Each case: every
// rank OK and identical output bytes on every rank.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdio>
#include <map>
#include <sstream>
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
                                                const std::vector<std::string>& env,
                                                const std::vector<std::string>& args) {
  const std::string id = new_id_hex();
  return sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        std::vector<std::string> argv = {g_worker, scenario, std::to_string(r),
                                         std::to_string(nranks), id};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      },
      env, 240);
}

std::vector<std::string> env_for(const std::string& codec) {
  return {"SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_TRANSPORT=socket", "SKETCHCCL_MIN_BYTES=0",
          "SKETCHCCL_TIMEOUT=60", "SKETCHCCL_CODEC=" + codec,
          // Several slices per chunk, so the pipeline has lanes in flight.
          "SKETCHCCL_SLICE_BYTES=65536"};
}

std::string data_for(const std::string& codec) {
  if (codec == "none") return "int";
  if (codec == "sparse" || codec == "s2") return "sparse";
  return "gauss";
}

struct RingCase {
  int nranks;
  std::string codec;
};

class GpuAllReduce : public ::testing::TestWithParam<RingCase> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

TEST_P(GpuAllReduce, EveryRankGetsTheSameResultWithinTheCodecsBound) {
  const RingCase c = GetParam();
  // Fewer elements than ranks, a few, and several slices per chunk (SLICE_BYTES 64 KiB).
  expect_agreement(run("ring", c.nranks, env_for(c.codec), {"1,3,100003", data_for(c.codec)}));
}

std::vector<RingCase> ring_cases() {
  std::vector<RingCase> v;
  for (int p : {2, 4}) {
    for (const char* codec : {"none", "bf16", "fp16", "q8", "q4", "q2", "casq2", "casq3", "casq4",
                              "s2", "sparse", "auto"})
      v.push_back({p, codec});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Codecs, GpuAllReduce, ::testing::ValuesIn(ring_cases()),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return std::to_string(i.param.nranks) + "ranks_" + i.param.codec;
                         });

// SKETCHCCL_ERROR_FEEDBACK=1 on device buffers: residuals and their arithmetic on the device.
TEST_P(GpuAllReduce, WithErrorFeedback) {
  const RingCase c = GetParam();
  if (c.codec != "q4" && c.codec != "casq3" && c.codec != "bf16") GTEST_SKIP() << "lossy subset";
  std::vector<std::string> env = env_for(c.codec);
  env.push_back("SKETCHCCL_ERROR_FEEDBACK=1");
  expect_agreement(run("ring", c.nranks, env, {"3,100003", data_for(c.codec)}));
}

class GpuApi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

TEST_F(GpuApi, StreamOrderIsKeptTheCallerIsNotBlockedOtherStreamsRun) {
  for (int p : {2, 4})
    expect_agreement(run("order", p, env_for("none"), {"1000000"}));
}

TEST_F(GpuApi, TwoAllReducesOnTwoStreamsInAGroup) {
  expect_agreement(run("group", 2, env_for("none"), {"300000"}));
}

TEST_F(GpuApi, StandaloneRefusesGraphCapture) {
  expect_agreement(run("capture", 1, env_for("none"), {"100000"}));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_gpu_worker [gtest flags]\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
