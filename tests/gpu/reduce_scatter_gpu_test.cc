// ncclReduceScatter on device buffers through nccl.h, standalone, 2 and 4 processes sharing one
// GPU over the socket transport (suite 'gpu'; skips without a device). Each rank checks its chunk.
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

std::string g_worker;

using sketchccl::gpu_test::have_device;

struct RingCase {
  int nranks;
  std::string codec;
  bool ef;
};

class GpuReduceScatter : public ::testing::TestWithParam<RingCase> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)";
  }
};

TEST_P(GpuReduceScatter, EachRankGetsItsChunkWithinTheCodecsBound) {
  const RingCase c = GetParam();
  const std::string data = c.codec == "none"                        ? "int"
                           : c.codec == "sparse" || c.codec == "s2" ? "sparse"
                                                                    : "gauss";
  const std::vector<std::string> env = {
      "SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_TRANSPORT=socket", "SKETCHCCL_MIN_BYTES=0",
      "SKETCHCCL_TIMEOUT=60", "SKETCHCCL_CODEC=" + c.codec,
      // Several slices per chunk, so the pipeline has lanes in flight.
      "SKETCHCCL_SLICE_BYTES=65536", std::string("SKETCHCCL_ERROR_FEEDBACK=") + (c.ef ? "1" : "0")};
  const std::string id = sketchccl::testing::new_id_hex();
  // recvcount: one, a few, and several slices per chunk.
  auto outs = sketchccl::testing::run_ranks(
      c.nranks,
      [&](int r) {
        return std::vector<std::string>{g_worker, std::to_string(r), std::to_string(c.nranks),
                                        id,       "1,3,100003",      data};
      },
      env, 240);
  sketchccl::testing::expect_agreement(outs);
}

std::vector<RingCase> cases() {
  std::vector<RingCase> v;
  for (int p : {2, 4}) {
    for (const char* codec : {"none", "bf16", "q8", "q4", "casq2", "s2", "sparse", "auto"})
      v.push_back({p, codec, false});
  }
  for (const char* codec : {"q4", "casq3"})
    v.push_back({4, codec, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Codecs, GpuReduceScatter, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<RingCase>& i) {
                           return std::to_string(i.param.nranks) + "ranks_" + i.param.codec +
                                  (i.param.ef ? "_ef" : "");
                         });

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_reduce_scatter_gpu_worker [gtest flags]\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return sketchccl::gpu_test::run_all_tests_or_skip();
}
