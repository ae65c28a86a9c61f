// Runs lifecycle_client (linked against the fake libnccl.so.2) in several processes under
// LD_PRELOAD=libsketchccl.so, one scenario per test, and checks every CHECK line it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace {

std::string g_client, g_shim, g_fake;

using Result = sketchccl::testing::CheckTally;

// `stats_in_log`: SKETCHCCL_STATS_FILE is each rank's fake log (to see what came first).
Result run(const std::string& mode, int nranks, bool stats_in_log = false,
           const std::string& timeout = "10", const std::string& transport = "auto") {
  char dir[] = "/tmp/sketchccl_life_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  auto outs = sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        const std::string log = d + "/log." + std::to_string(r);
        return std::vector<std::string>{"/usr/bin/env", "FAKE_NCCL_LOG=" + log,
                                        // A node per rank: one node forwards everything.
                                        "SKETCHCCL_HOSTID=lifehost" + std::to_string(r),
                                        "SKETCHCCL_STATS_FILE=" + (stats_in_log ? log : ""),
                                        g_client, std::to_string(r), std::to_string(nranks),
                                        d + "/id", mode};
      },
      {"LD_PRELOAD=" + g_shim, "SKETCHCCL_NCCL_LIB=" + g_fake, "SKETCHCCL_TIMEOUT=" + timeout,
       "SKETCHCCL_TRANSPORT=" + transport, "SKETCHCCL_CODEC=q8"},
      90);
  Result res = sketchccl::testing::tally_checks(outs);
  std::filesystem::remove_all(d);
  return res;
}

TEST(Lifecycle, SplitIsAgreedWhenARankIsLateAndNeverFailsTheParent) {
  Result r = run("latesplit", 3);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 3 * 9) << r.text;
}

TEST(Lifecycle, AFailedSplitExchangeNeverFailsTheParent) {
  Result r = run("splitfail", 2, false, "2");
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 8 + 4) << r.text;
  EXPECT_NE(r.text.find("membership exchange failed"), std::string::npos) << r.text;
}

TEST(Lifecycle, NonblockingSplitReturnsAtOnceAndItsChildIsTakenOverOnEveryRank) {
  Result r = run("nbsplit", 2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 10) << r.text;
}

TEST(Lifecycle, AbortRunsTheRealAbortBeforeJoiningSketchCclsSide) {
  Result r = run("abort", 2, /*stats_in_log=*/true);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 3) << r.text;
}

TEST(Lifecycle, RevokeAndShrinkAbortStopSketchCclsSide) {
  Result r = run("revoke", 2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 11) << r.text;
}

TEST(Lifecycle, ForkedChildThatCallsExitDoesNotHang) {
  Result r = run("fork", 2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 5) << r.text;
}

TEST(Lifecycle, ScalableInitReleasesTheRootsOfItsOtherIds) {
  // Sockets only, so that the threads of each process are known: the main one and the proxy.
  Result r = run("scalable", 2, false, "10", "socket");
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 4) << r.text;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s CLIENT LIBSKETCHCCL FAKE_LIBNCCL\n", argv[0]);
    return 2;
  }
  g_client = argv[1];
  g_shim = argv[2];
  g_fake = argv[3];
  return RUN_ALL_TESTS();
}
