// The compressed AllGather end to end in standalone mode: 4 processes over loopback, through the
// exported API only (allgather_worker links libsketchccl.so). SKETCHCCL_ALLGATHER_CODEC=q8: the
// same bits on every rank, the exact gather's NMSE bound and at most 0.35 of the exact ring's
// bytes, flat and node-aware (2 nodes of 2, only the rail's bytes between nodes); unset: the
// exact gather; a codec that cannot gather refused at init.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"

namespace {

std::string g_worker;

void expect_cases(const sketchccl::testing::Outcome& o, const std::vector<std::string>& names) {
  sketchccl::testing::expect_agreement(o.ranks);
  for (const auto& rank : o.ranks) {
    for (const std::string& name : names)
      EXPECT_TRUE(sketchccl::testing::case_ok(rank.out, name)) << name << "\n" << rank.out;
  }
}

// Small slices, so that each rank's shard is several packets.
const std::vector<std::string> kEnv = {"SKETCHCCL_MIN_BYTES=0", "SKETCHCCL_SLICE_BYTES=64K"};

TEST(AllGather, Q8SameBitsOnEveryRankWithinTheBoundAndBytes) {
  std::vector<std::string> env = kEnv;
  env.push_back("SKETCHCCL_ALLGATHER_CODEC=q8");
  expect_cases(sketchccl::testing::run_scenario(g_worker, "compressed", 4, env, {}, 120),
               {"f32-q8", "f32-q8-in-place", "bf16-q8", "f16-q8-in-place", "ext-codec-bf16",
                "ext-exact", "grouped", "ext-codec-s2-refused"});
}

TEST(AllGather, Q8NodeAwareOnTwoInterleavedNodes) {
  std::vector<std::string> env = kEnv;
  env.push_back("SKETCHCCL_ALLGATHER_CODEC=q8");
  expect_cases(sketchccl::testing::run_scenario(g_worker, "node-aware", 4, env, {}, 120),
               {"f32-q8-node-aware", "f32-q8-node-aware-in-place"});
}

TEST(AllGather, UnsetStaysExact) {
  expect_cases(sketchccl::testing::run_scenario(g_worker, "exact", 4, kEnv, {}, 120),
               {"f32-exact", "bf16-exact"});
}

TEST(AllGather, ACodecThatCannotGatherIsRefusedAtInit) {
  std::vector<std::string> env = kEnv;
  env.push_back("SKETCHCCL_ALLGATHER_CODEC=s2");
  expect_cases(sketchccl::testing::run_scenario(g_worker, "bad-codec", 2, env, {}, 60),
               {"bad-codec-refused"});
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ALLGATHER_WORKER\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return RUN_ALL_TESTS();
}
