// Standalone mode with several ranks on one GPU (NCCL refuses it: "Duplicate GPU detected"):
// 2 and 4 processes on device 0 run the exact calls on host and on device memory next to a device
// AllReduce; also coll_worker's send/recv scenario with CUDA present. Skips without a
// device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/gpu/gpu_test_main.h"
#include "tests/gpu/have_device.h"

namespace {

std::string g_gpu_worker, g_coll_worker;

using sketchccl::gpu_test::have_device;

class ManyRanksOneDevice : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

const std::vector<std::string> kEnv = {"SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_TIMEOUT=60",
                                       "SKETCHCCL_CODEC=none", "SKETCHCCL_MIN_BYTES=0"};

TEST_P(ManyRanksOneDevice, ExactCallsOnHostAndDeviceNextToADeviceAllReduce) {
  auto o = sketchccl::testing::run_scenario(g_gpu_worker, "mixed", GetParam(), kEnv, {}, 240);
  sketchccl::testing::expect_agreement(o.ranks);
}

TEST_P(ManyRanksOneDevice, SendRecvAndGroups) {
  auto o = sketchccl::testing::run_scenario(g_coll_worker, "p2p", GetParam(), kEnv, {}, 240);
  sketchccl::testing::expect_agreement(o.ranks);
}

INSTANTIATE_TEST_SUITE_P(OneGpu, ManyRanksOneDevice, ::testing::Values(2, 4),
                         [](const auto& info) { return "x" + std::to_string(info.param); });

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s COLLECTIVES_GPU_WORKER COLL_WORKER\n", argv[0]);
    return 2;
  }
  g_gpu_worker = argv[1];
  g_coll_worker = argv[2];
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
