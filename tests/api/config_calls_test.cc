// The nccl*Config collectives end to end in standalone mode: 3 processes over loopback, through
// the exported API only (config_worker links libsketchccl.so). Every case OK on every rank, with
// the same bytes where the call's output is the same everywhere.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"

namespace {

std::string g_worker;

TEST(ConfigCalls, CompressedAndAccurateAsThePlainCallsWithPerCallOptions) {
  auto o = sketchccl::testing::run_scenario(g_worker, "config", 3, {"SKETCHCCL_CODEC=q8"}, {}, 120);
  sketchccl::testing::expect_agreement(o.ranks);
  for (const auto& rank : o.ranks) {
    for (const char* name :
         {"plain-config-null", "default-config", "nccl-settings-ignored", "ext-codec-bf16",
          "ext-exact", "uninitialized-refused", "unknown-codec-refused", "reduce-scatter",
          "broadcast-as-plain", "allgather-as-plain"}) {
      EXPECT_TRUE(sketchccl::testing::case_ok(rank.out, name)) << name << "\n" << rank.out;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG_WORKER\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return RUN_ALL_TESTS();
}
