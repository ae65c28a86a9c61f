// Runs personality_client in two processes under LD_PRELOAD=libsketchccl.so in front of each
// personality of the fake NCCL (SKETCHCCL_FAKE_NCCL_VERSION: 2.28.9, 2.29.7, 2.30.7, 2.31.2,
// 2.32.6), and checks every CHECK line it prints and how many there are.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace {

std::string g_client, g_shim;
std::map<int, std::string> g_fakes;  // personality -> its library

using Result = sketchccl::testing::CheckTally;

Result run(int version) {
  char dir[] = "/tmp/sketchccl_personality_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  const int nranks = 2;
  auto outs = sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        return std::vector<std::string>{
            "/usr/bin/env", "FAKE_NCCL_LOG=" + d + "/log." + std::to_string(r),
            // A node per rank: one node forwards everything.
            "SKETCHCCL_HOSTID=personality" + std::to_string(r), g_client, std::to_string(r),
            std::to_string(nranks), d, std::to_string(version)};
      },
      {"LD_PRELOAD=" + g_shim, "SKETCHCCL_NCCL_LIB=" + g_fakes.at(version),
       "SKETCHCCL_FAKE_NCCL_VERSION=" + std::to_string(version), "SKETCHCCL_TIMEOUT=10",
       "SKETCHCCL_CODEC=q8"},
      120);
  Result res = sketchccl::testing::tally_checks(outs);
  std::filesystem::remove_all(d);
  return res;
}

class Personality : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(Personality, TheLifecycleAndEveryNewFunctionInFrontOfIt) {
  const auto [version, checks] = GetParam();
  Result r = run(version);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, checks) << r.text;
}

// The checks of both ranks each personality gives (rank 0 alone asks for the grown id).
INSTANTIATE_TEST_SUITE_P(Nccl, Personality,
                         ::testing::Values(std::make_pair(22809, 54), std::make_pair(22907, 63),
                                           std::make_pair(23007, 63), std::make_pair(23102, 83),
                                           std::make_pair(23206, 83)),
                         [](const auto& info) { return std::to_string(info.param.first); });

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s CLIENT LIBSKETCHCCL FAKE_22809 FAKE_22907 ... FAKE_23206\n",
                 argv[0]);
    return 2;
  }
  g_client = argv[1];
  g_shim = argv[2];
  const int versions[] = {22809, 22907, 23007, 23102, 23206};
  for (int i = 0; i < 5; ++i)
    g_fakes[versions[i]] = argv[3 + i];
  return RUN_ALL_TESTS();
}
