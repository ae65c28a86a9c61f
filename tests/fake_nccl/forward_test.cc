// Runs forward_client (linked against the fake libnccl.so.2) in several processes under
// LD_PRELOAD=libsketchccl.so and checks every CHECK line it prints.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace {

std::string g_client, g_shim, g_fake;

struct Result {
  int fails = 0;
  int checks = 0;
  std::string text;
};

// Runs `nranks` clients; codec_for(rank) gives each rank's SKETCHCCL_CODEC. Each rank is a node
// of its own (SKETCHCCL_HOSTID) unless one_node: ranks on one node forward every call to NCCL.
Result run(const std::string& mode, int nranks, const std::function<std::string(int)>& codec_for,
           bool one_node = false, int ranks_per_node = 1,
           const std::vector<std::string>& extra_env = {}) {
  char dir[] = "/tmp/sketchccl_fake_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::vector<std::string> env = {"LD_PRELOAD=" + g_shim, "SKETCHCCL_NCCL_LIB=" + g_fake,
                                  "SKETCHCCL_TIMEOUT=30"};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  auto outs = sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        return std::vector<std::string>{
            "/usr/bin/env",
            "FAKE_NCCL_LOG=" + d + "/log." + std::to_string(r),
            "SKETCHCCL_CODEC=" + codec_for(r),
            "SKETCHCCL_HOSTID=fakehost" +
                (one_node ? std::string() : std::to_string(r / ranks_per_node)),
            g_client,
            std::to_string(r),
            std::to_string(nranks),
            d + "/id",
            mode};
      },
      env, 120);
  Result res;
  for (size_t r = 0; r < outs.size(); ++r) {
    res.text += "--- rank " + std::to_string(r) + " (exit " + std::to_string(outs[r].exit_code) +
                ", signal " + std::to_string(outs[r].signal) + ")\n" + outs[r].out;
    if (outs[r].exit_code != 0) res.fails++;
    size_t pos = 0;
    while ((pos = outs[r].out.find("CHECK ", pos)) != std::string::npos) {
      res.checks++;
      size_t eol = outs[r].out.find('\n', pos);
      std::string line = outs[r].out.substr(pos, eol - pos);
      if (line.find(" FAIL") != std::string::npos) res.fails++;
      pos = eol;
    }
  }
  std::filesystem::remove_all(d);
  return res;
}

TEST(Forwarding, EveryFunctionArrivesUnchangedAndThePolicyTakesOverTheRest) {
  Result r = run("full", 3, [](int) { return "auto"; });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GT(r.checks, 3 * 40) << r.text;
}

TEST(Forwarding, AnIdWithoutARecordIsForwardedOnEveryRank) {
  Result r = run("norecord", 3, [](int) { return "q8"; });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GT(r.checks, 3 * 10) << r.text;
}

TEST(Forwarding, RanksThatDisagreeOnConfigurationAreForwardedOnEveryRank) {
  Result r = run("mismatch", 3, [](int rank) { return rank == 1 ? "q4" : "q8"; });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GT(r.checks, 3 * 10) << r.text;
}

// SKETCHCCL_CODEC=auto on a link stated faster than this host's codecs: NCCL alone is predicted
// faster for every eligible call, which goes to NCCL unchanged (docs/scale.md).
TEST(Forwarding, AutoForwardsToNcclWhereNoCodecIsPredictedFaster) {
  Result r =
      run("fastlink", 3, [](int) { return "auto"; }, /*one_node=*/false, /*ranks_per_node=*/1,
          {"SKETCHCCL_LINK_GBPS=100000", "SKETCHCCL_LINK_LATENCY_US=5"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GT(r.checks, 3 * 10) << r.text;
}

TEST(Forwarding, RanksOnOneNodeForwardEveryCallToNccl) {
  // A record and agreed configurations, but one node: NCCL's own paths win (docs/hierarchy.md);
  // the client's non-"full" modes expect every reduction forwarded.
  Result r = run(
      "onenode", 3, [](int) { return "q8"; }, /*one_node=*/true);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GT(r.checks, 3 * 10) << r.text;
}

TEST(Forwarding, TwoNodesOfTwoRanksRunNcclPhasesAroundTheCompressedRail) {
  Result r = run(
      "hier", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * 14) << r.text;
}

// The per-call log (SKETCHCCL_DEBUG=INFO) names the path: the ReduceScatters, like the
// AllReduces, take the NCCL-phase hierarchy.
TEST(Forwarding, ThePerCallLogSaysAReduceScatterIsHierarchical) {
  Result r = run("hier", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2,
                 {"SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=COLL"});
  EXPECT_EQ(r.fails, 0) << r.text;
  size_t hier_rs = 0;
  for (size_t at = 0; (at = r.text.find("COLL ReduceScatter: opCount", at)) != std::string::npos;
       ++at) {
    const std::string line = r.text.substr(at, r.text.find('\n', at) - at);
    if (line.find("count 65537 ") != std::string::npos &&
        line.find("hierarchical (NCCL's intra-node phases)") != std::string::npos)
      ++hier_rs;
  }
  EXPECT_EQ(hier_rs, 4u * 3) << r.text;  // three calls on each of the four ranks
}

// An init inside ncclGroupStart/End, as nccl-tests makes every communicator: NCCL runs it at the
// group's end, so the node split comes in the outermost ncclGroupEnd, after the real one.
TEST(Forwarding, AnInitInsideAGroupSplitsItsNodeCommunicatorAtTheGroupsEnd) {
  Result r = run(
      "hiergroup", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * 13) << r.text;
}

// A nonblocking parent: NCCL writes the node communicator after ncclCommSplit has returned (from
// its own thread, into the slot it was given), so the split waits for it, bounded, and the
// phases run; on a nonblocking node communicator too (NCCL_COMM_BLOCKING=0 makes every
// communicator nonblocking), whose phases return ncclInProgress: enqueued, never a reason to
// skip the phases the node's peers wait for.
TEST(Forwarding, ANonblockingParentRunsNcclPhasesAroundTheCompressedRail) {
  Result r = run(
      "hiernb", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * 14) << r.text;
}

TEST(Forwarding, NonblockingNodeCommunicatorsPhasesInProgressAreEnqueued) {
  Result r = run("hiernb", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2,
                 {"NCCL_COMM_BLOCKING=0"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * 14) << r.text;
}

// The GATHERHASH lines ("GATHERHASH type hash") of every rank: per type one value (the same bits
// on every rank), `ranks` lines each, for `types` types.
void expect_same_gather_bits(const Result& r, int ranks, size_t types) {
  std::map<std::string, std::set<std::string>> hashes;
  std::map<std::string, int> lines;
  for (size_t pos = 0; (pos = r.text.find("GATHERHASH ", pos)) != std::string::npos;) {
    const size_t eol = r.text.find('\n', pos);
    const std::string rest = r.text.substr(pos + 11, eol - pos - 11);
    const std::string type = rest.substr(0, rest.find(' '));
    hashes[type].insert(rest.substr(rest.find(' ') + 1));
    ++lines[type];
    pos = eol;
  }
  EXPECT_EQ(hashes.size(), types) << r.text;
  for (const auto& [type, h] : hashes) {
    EXPECT_EQ(lines[type], ranks) << type << "\n" << r.text;
    EXPECT_EQ(h.size(), 1u) << type << "\n" << r.text;
  }
}

// SKETCHCCL_ALLGATHER_CODEC unset: a float AllGather of host buffers goes to NCCL unchanged.
TEST(Forwarding, AnAllGatherWithoutItsCodecArrivesUnchanged) {
  Result r = run("gather", 3, [](int) { return "q8"; });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 3 * 5) << r.text;
}

// Set, 2 nodes of 2 ranks: taken over (SketchCCL's node-aware gather of host buffers), float32
// and bfloat16, the same bits on every rank, counted; an int32 AllGather still arrives.
TEST(Forwarding, AnAllGatherWithItsCodecIsTakenOverWithTheSameBitsEverywhere) {
  Result r = run("gather", 4, [](int) { return "q8"; }, /*one_node=*/false, /*ranks_per_node=*/2,
                 {"SKETCHCCL_ALLGATHER_CODEC=q8"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * 6) << r.text;
  expect_same_gather_bits(r, 4, 2);
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
