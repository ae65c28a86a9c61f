// ncclReduceScatter end to end in standalone mode: P processes over loopback, every codec,
// through nccl.h only (the worker links libsketchccl.so). Each rank checks its own chunk.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"

namespace {

using sketchccl::testing::case_ok;
using sketchccl::testing::data_for;

std::string g_worker;  // path of reduce_scatter_worker, from argv

using sketchccl::testing::Outcome;

Outcome run(const std::string& scenario, int nranks, const std::vector<std::string>& env,
            const std::vector<std::string>& args, double timeout_s = 120) {
  return sketchccl::testing::run_scenario(g_worker, scenario, nranks, env, args, timeout_s);
}

struct MatrixCase {
  std::string codec;
  int nranks;
};

class ReduceScatterMatrix : public ::testing::TestWithParam<MatrixCase> {};

// recvcount 0, 1, P - 1, odd, large (the input is P times that).
TEST_P(ReduceScatterMatrix, EveryCountTypeOpAndPlacement) {
  const MatrixCase& c = GetParam();
  const int p = c.nranks;
  std::vector<std::string> args = {data_for(c.codec),     "0",    "1",
                                   std::to_string(p - 1), "1001", std::to_string((1 << 18) + 3)};
  Outcome o = run("matrix", p, {"SKETCHCCL_CODEC=" + c.codec}, args, 240);
  sketchccl::testing::expect_agreement(o.ranks);
  std::printf("[ info ] %s x%d: %.1f s\n", c.codec.c_str(), p, o.seconds);
}

std::vector<MatrixCase> matrix_cases() {
  std::vector<MatrixCase> out;
  for (const char* codec : {"none", "bf16", "fp16", "q8", "q4", "q2", "casq2", "casq3", "casq4",
                            "s2", "sparse", "auto"}) {
    out.push_back({codec, 3});
  }
  for (int p : {2, 4}) {
    for (const char* codec : {"none", "q8", "sparse"})
      out.push_back({codec, p});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Standalone, ReduceScatterMatrix, ::testing::ValuesIn(matrix_cases()),
                         [](const auto& info) {
                           return info.param.codec + "_x" + std::to_string(info.param.nranks);
                         });

TEST(ReduceScatter, BadInputGivesErrorsAndLeavesTheCommunicatorUsable) {
  Outcome o = run("bad", 3, {"SKETCHCCL_DEBUG=NONE"}, {});
  sketchccl::testing::expect_agreement(o.ranks);
}

TEST(ReduceScatter, OneThreadDrivesThreeRanksInAGroupWithAnAllReduce) {
  for (const char* codec : {"none", "q8"}) {
    auto outs = sketchccl::testing::run_ranks(
        1,
        [](int) {
          return std::vector<std::string>{g_worker, "group", "3"};
        },
        {std::string("SKETCHCCL_CODEC=") + codec}, 120);
    EXPECT_EQ(outs[0].exit_code, 0) << codec << "\n" << outs[0].out;
    EXPECT_TRUE(case_ok(outs[0].out, "rs-group-one-thread")) << codec << "\n" << outs[0].out;
  }
}

TEST(ReduceScatter, CountMismatchFailsOnEveryRankWithoutHanging) {
  Outcome o = run("mismatch", 3, {"SKETCHCCL_CODEC=q8", "SKETCHCCL_TIMEOUT=10"}, {}, 60);
  sketchccl::testing::expect_agreement(o.ranks);
  EXPECT_LT(o.seconds, 30);
}

TEST(ReduceScatter, KilledRankGivesErrorsWithinTheTimeoutAndAbortIsPrompt) {
  Outcome o =
      run("kill", 3, {"SKETCHCCL_CODEC=none", "SKETCHCCL_TIMEOUT=8", "SKETCHCCL_DEBUG=NONE"},
          {"300000"}, 60);
  for (size_t r = 0; r + 1 < o.ranks.size(); ++r) {
    const auto& ro = o.ranks[r];
    EXPECT_TRUE(case_ok(ro.out, "rs-peer-killed-gives-error")) << "rank " << r << "\n" << ro.out;
    EXPECT_TRUE(case_ok(ro.out, "rs-abort-is-prompt")) << "rank " << r << "\n" << ro.out;
  }
  EXPECT_EQ(o.ranks.back().signal, SIGKILL);
  EXPECT_LT(o.seconds, 30);
}

double ef_mean_nmse(const Outcome& o) {
  const std::string& out = o.ranks[0].out;
  const size_t at = out.find("EF_MEAN_NMSE ");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + 13));
}

TEST(ReduceScatter, ErrorFeedbackCancelsCompressionErrorAcrossCalls) {
  const std::vector<std::string> args = {"20000", "16"};
  Outcome plain = run("ef", 3, {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=0"}, args);
  Outcome ef = run("ef", 3, {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=1"}, args);
  sketchccl::testing::expect_agreement(plain.ranks);
  sketchccl::testing::expect_agreement(ef.ranks);
  const double a = ef_mean_nmse(plain), b = ef_mean_nmse(ef);
  std::printf("[ info ] q4, 3 ranks, mean of 16 calls: NMSE %.3g without, %.3g with feedback\n", a,
              b);
  ASSERT_GT(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_LT(b, a / 5) << "error feedback should cancel most of the error of the mean";
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_reduce_scatter_worker [gtest flags]\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return RUN_ALL_TESTS();
}
