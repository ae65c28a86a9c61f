// The NCCL API end to end in standalone mode: P processes over loopback, every codec, through
// nccl.h only (the worker links libsketchccl.so). Each case: every rank OK, identical bytes.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"

namespace {

using sketchccl::testing::case_ok;
using sketchccl::testing::data_for;
using sketchccl::testing::new_id_hex;

std::string g_worker;  // path of nccl_worker, from argv

using sketchccl::testing::Outcome;

Outcome run(const std::string& scenario, int nranks, const std::vector<std::string>& env,
            const std::vector<std::string>& args, double timeout_s = 120) {
  return sketchccl::testing::run_scenario(g_worker, scenario, nranks, env, args, timeout_s);
}

void expect_agreement(const Outcome& o, bool expect_exit_zero = true) {
  sketchccl::testing::expect_agreement(o.ranks, expect_exit_zero);
}

const std::vector<std::string> kCounts(int p) {
  return {"0", "1", std::to_string(p - 1), std::to_string(p + 1), std::to_string((1 << 20) + 3)};
}

struct MatrixCase {
  std::string codec;
  int nranks;
  std::string transport = "auto";  // SKETCHCCL_TRANSPORT
};

class AllReduceMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(AllReduceMatrix, EveryCountTypeOpAndPlacement) {
  const MatrixCase& c = GetParam();
  std::vector<std::string> args = {data_for(c.codec)};
  for (const std::string& n : kCounts(c.nranks))
    args.push_back(n);
  Outcome o = run("matrix", c.nranks,
                  {"SKETCHCCL_CODEC=" + c.codec, "SKETCHCCL_TRANSPORT=" + c.transport}, args, 240);
  expect_agreement(o);
  std::printf("[ info ] %s x%d: %.1f s\n", c.codec.c_str(), c.nranks, o.seconds);
}

std::vector<MatrixCase> matrix_cases() {
  std::vector<MatrixCase> out;
  for (const char* codec : {"none", "bf16", "fp16", "q8", "q4", "q2", "casq2", "casq3", "casq4",
                            "s2", "sparse", "q8r", "q4r", "q2r", "auto"}) {
    out.push_back({codec, 4});
  }
  for (int p : {2, 3, 8}) {
    for (const char* codec : {"none", "q8", "s2", "sparse", "q4r"})
      out.push_back({codec, p});
  }
  for (const char* codec : {"none", "q8", "sparse"})
    out.push_back({codec, 4, "socket"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Standalone, AllReduceMatrix, ::testing::ValuesIn(matrix_cases()),
                         [](const auto& info) {
                           return info.param.codec + "_x" + std::to_string(info.param.nranks) +
                                  (info.param.transport == "auto" ? ""
                                                                  : "_" + info.param.transport);
                         });

TEST(AllReduce, S2PeelsNearlyEverythingOnSparseData) {
  for (int p : {2, 4}) {
    Outcome o = run("s2", p, {"SKETCHCCL_CODEC=s2"}, {"2000000"});
    expect_agreement(o);
  }
}

// Embedding-style gradients, whose support varies between slices and calls, push some slices
// past s2's peeling threshold; the repair of what does not peel makes every call exact.
TEST(AllReduce, S2IsExactOnClusteredSupport) {
  Outcome o = run("s2clustered", 4, {"SKETCHCCL_CODEC=s2"}, {"1048576"}, 240);
  expect_agreement(o);
}

TEST(AllReduce, SixtyFourMiElements) {
  Outcome o = run("big", 2, {"SKETCHCCL_CODEC=q8"}, {std::to_string(64u << 20)}, 300);
  expect_agreement(o);
}

TEST(AllReduce, BadInputGivesErrorsAndLeavesTheCommunicatorUsable) {
  Outcome o = run("bad", 3, {"SKETCHCCL_DEBUG=NONE"}, {});
  expect_agreement(o);
}

TEST(AllReduce, OneThreadDrivesTwoRanksInAGroup) {
  auto outs = sketchccl::testing::run_ranks(
      1,
      [](int) {
        return std::vector<std::string>{g_worker, "group", "2"};
      },
      {"SKETCHCCL_CODEC=q8"}, 120);
  EXPECT_EQ(outs[0].exit_code, 0) << outs[0].out;
  EXPECT_NE(outs[0].out.find("CASE group-one-thread HASH"), std::string::npos) << outs[0].out;
  EXPECT_EQ(outs[0].out.find("FAIL"), std::string::npos) << outs[0].out;
}

TEST(AllReduce, TwoCommunicatorsAtOnce) {
  const std::string id2 = new_id_hex();
  Outcome o = run("twocomms", 3, {"SKETCHCCL_CODEC=q8"}, {id2});
  expect_agreement(o);
}

TEST(AllReduce, SplitCommunicator) {
  Outcome o = run("split", 4, {"SKETCHCCL_CODEC=none"}, {});
  for (const auto& r : o.ranks) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  }
}

TEST(AllReduce, CountMismatchFailsOnEveryRankWithoutHanging) {
  Outcome o = run("mismatch", 3, {"SKETCHCCL_CODEC=q8", "SKETCHCCL_TIMEOUT=10"}, {}, 60);
  expect_agreement(o);
  EXPECT_LT(o.seconds, 30);
}

TEST(AllReduce, KilledRankGivesErrorsWithinTheTimeoutAndAbortIsPrompt) {
  Outcome o =
      run("kill", 3, {"SKETCHCCL_CODEC=none", "SKETCHCCL_TIMEOUT=8", "SKETCHCCL_DEBUG=NONE"},
          {"1000000"}, 60);
  for (size_t r = 0; r + 1 < o.ranks.size(); ++r) {
    const auto& ro = o.ranks[r];
    EXPECT_TRUE(case_ok(ro.out, "peer-killed-gives-error")) << "rank " << r << "\n" << ro.out;
    EXPECT_TRUE(case_ok(ro.out, "abort-is-prompt")) << "rank " << r << "\n" << ro.out;
  }
  EXPECT_EQ(o.ranks.back().signal, SIGKILL);
  EXPECT_LT(o.seconds, 30);
}

TEST(AllReduce, NonBlockingInitReturnsInProgressThenCompletes) {
  Outcome o = run("nonblocking", 3, {"SKETCHCCL_CODEC=none"}, {});
  expect_agreement(o);
}

double ef_mean_nmse(const Outcome& o) {
  const std::string& out = o.ranks[0].out;
  size_t at = out.find("EF_MEAN_NMSE ");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + 13));
}

TEST(AllReduce, ErrorFeedbackCancelsCompressionErrorAcrossCalls) {
  const std::vector<std::string> args = {"65536", "16"};
  Outcome plain = run("ef", 3, {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=0"}, args);
  Outcome ef = run("ef", 3, {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=1"}, args);
  expect_agreement(plain);
  expect_agreement(ef);
  const double a = ef_mean_nmse(plain), b = ef_mean_nmse(ef);
  std::printf("[ info ] q4, 3 ranks, mean of 16 calls: NMSE %.3g without, %.3g with feedback\n", a,
              b);
  ASSERT_GT(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_LT(b, a / 5) << "error feedback should cancel most of the error of the mean";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a scenario with SKETCHCCL_STATS_FILE set and returns each rank's JSON line.
std::vector<std::string> run_with_stats(const std::string& scenario, int nranks,
                                        std::vector<std::string> env,
                                        const std::vector<std::string>& args) {
  char dir[] = "/tmp/sketchccl_stats_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  env.push_back("SKETCHCCL_STATS_FILE=" + std::string(dir) + "/stats.%p.json");
  Outcome o = run(scenario, nranks, env, args);
  expect_agreement(o);
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    out.push_back(read_file(entry.path()));
    std::filesystem::remove(entry.path());
  }
  std::filesystem::remove(dir);
  EXPECT_EQ(out.size(), static_cast<size_t>(nranks));
  return out;
}

// A slow link stated: these two are about auto's choice of codec, not about its network verdict
// (whose choice on a loopback link measured on a loaded machine may be another rung).
TEST(AllReduce, AutoKeepsSparseBuffersSparseAndStatsAreWritten) {
  for (const std::string& json : run_with_stats(
           "s2auto", 2, {"SKETCHCCL_CODEC=auto", "SKETCHCCL_LINK_GBPS=0.1"}, {"300000"})) {
    EXPECT_NE(json.find("\"sparse\": {\"calls\": 3,"), std::string::npos) << json;
    EXPECT_NE(json.find("\"calls_taken\": 3,"), std::string::npos) << json;
    EXPECT_EQ(json.find("\"q8\""), std::string::npos) << json;
  }
}

TEST(AllReduce, AutoTurnsDenseBuffersToTheDenseCodec) {
  for (const std::string& json : run_with_stats(
           "ef", 2, {"SKETCHCCL_CODEC=auto", "SKETCHCCL_DENSE_CODEC=q4", "SKETCHCCL_LINK_GBPS=0.1"},
           {"100000", "5"})) {
    EXPECT_NE(json.find("\"sparse\": {\"calls\": 1,"), std::string::npos) << json;
    EXPECT_NE(json.find("\"q4\": {\"calls\": 4,"), std::string::npos) << json;
  }
}

// auto's link figures (docs/scale.md): ranks told different link speeds agree on the slowest, and
// ranks that each probe their own link agree on one set of figures and run the same codecs.
TEST(AllReduce, AutoRanksAgreeOnTheSlowestLinkWhateverEachMeasured) {
  const std::string id = new_id_hex();
  const char* told[] = {"10", "0.5", "100", "2"};
  auto outs = sketchccl::testing::run_ranks(
      4,
      [&](int r) {
        return std::vector<std::string>{"/usr/bin/env",
                                        std::string("SKETCHCCL_LINK_GBPS=") + told[r],
                                        g_worker,
                                        "network",
                                        std::to_string(r),
                                        "4",
                                        id,
                                        "1100000"};
      },
      {"SKETCHCCL_CODEC=auto"}, 120);
  sketchccl::testing::expect_agreement(outs);
  for (const auto& o : outs) {
    EXPECT_NE(o.out.find(" link_gbps 0.5 "), std::string::npos) << o.out;
    EXPECT_NE(o.out.find(" codecs q8:1 sparse:1 "), std::string::npos) << o.out;
  }
  // Probed: each rank times its own link; the figures and codecs agree on every rank.
  Outcome probed = run("network", 4, {"SKETCHCCL_CODEC=auto"}, {"1100000"});
  expect_agreement(probed);
}

TEST(AllReduce, SparseIsExactWithEachSupportEncoding) {
  // Three calls on one buffer, each checked exact; the index list needs the first call's support.
  const std::pair<const char*, const char*> cases[] = {
      {"rows", "\"support\": {\"element_bitmap\": 0, \"row_bitmap\": 3, \"index_list\": 0,"},
      {"indices", "\"support\": {\"element_bitmap\": 1, \"row_bitmap\": 0, \"index_list\": 2,"}};
  for (const auto& [encoding, expect] : cases) {
    for (const std::string& json : run_with_stats(
             "s2", 3,
             {"SKETCHCCL_CODEC=sparse", std::string("SKETCHCCL_SPARSE_SUPPORT=") + encoding},
             {"300000"})) {
      EXPECT_NE(json.find("\"sparse\": {\"calls\": 3,"), std::string::npos) << json;
      EXPECT_NE(json.find(expect), std::string::npos) << encoding << ": " << json;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_nccl_worker [gtest flags]\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return RUN_ALL_TESTS();
}
