// The node-aware AllReduce and ReduceScatter (docs/hierarchy.md) in standalone mode: P processes on
// loopback, each given a node by SKETCHCCL_HOSTID, through nccl.h only. Every rank must print only
// OK cases with identical bytes, and the log and statistics must show which plan ran.
#include <gtest/gtest.h>
#include <nccl.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/api/agreement.h"
#include "tests/api/launcher.h"

namespace {

using sketchccl::testing::case_ok;
using sketchccl::testing::data_for;
using sketchccl::testing::expect_agreement;
using sketchccl::testing::new_id_hex;
using sketchccl::testing::RankOutput;

std::string g_worker;     // path of nccl_worker, from argv
std::string g_rs_worker;  // path of reduce_scatter_worker, from argv

struct Outcome {
  std::vector<RankOutput> ranks;
  double seconds = 0;
};

// Runs `scenario` on nranks processes; rank r is on node host_of(r) (SKETCHCCL_HOSTID) and
// starts after delay_of(r) seconds.
Outcome run(const std::string& scenario, int nranks, const std::function<std::string(int)>& host_of,
            const std::vector<std::string>& env, const std::vector<std::string>& args,
            double timeout_s = 120, const std::function<int(int)>& delay_of = nullptr,
            const std::string& worker = g_worker) {
  const std::string id = new_id_hex();
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o;
  o.ranks = sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        std::string cmd = "exec \"$0\" \"$@\"";
        if (delay_of) cmd = "sleep " + std::to_string(delay_of(r)) + "; " + cmd;
        std::vector<std::string> argv = {"/bin/sh",
                                         "-c",
                                         cmd,
                                         "/usr/bin/env",
                                         "SKETCHCCL_HOSTID=" + host_of(r),
                                         worker,
                                         scenario,
                                         std::to_string(r),
                                         std::to_string(nranks),
                                         id};
        argv.insert(argv.end(), args.begin(), args.end());
        return argv;
      },
      env, timeout_s);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

// Ranks placed node by node (as torchrun and Slurm place them): L per node.
std::function<std::string(int)> by_node(int L) {
  return [L](int r) { return "node" + std::to_string(r / L); };
}

bool logged(const Outcome& o, const std::string& text) {
  return o.ranks[0].out.find(text) != std::string::npos;
}

struct Shape {
  int nodes, per_node;
  std::string codec;
};

class Hierarchy : public ::testing::TestWithParam<Shape> {};

// Odd counts (fewer elements than ranks in a node, one more than a multiple) and every type, op
// and placement of the matrix scenario; `none` on integers must be exact.
TEST_P(Hierarchy, EveryCountTypeAndOpAgreesAndIsAccurate) {
  const Shape& s = GetParam();
  const int p = s.nodes * s.per_node;
  Outcome o =
      run("matrix", p, by_node(s.per_node),
          {"SKETCHCCL_CODEC=" + s.codec, "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
          {data_for(s.codec), "1", std::to_string(s.per_node + 1), "262147"}, 240);
  expect_agreement(o.ranks);
  const std::string topo = std::to_string(s.nodes) + " nodes x " + std::to_string(s.per_node) +
                           " ranks (SKETCHCCL_HOSTID=node0): hierarchical AllReduce";
  EXPECT_TRUE(logged(o, topo)) << o.ranks[0].out;
  std::printf("[ info ] %dx%d %s: %.1f s\n", s.nodes, s.per_node, s.codec.c_str(), o.seconds);
}

INSTANTIATE_TEST_SUITE_P(Standalone, Hierarchy,
                         ::testing::Values(Shape{2, 2, "none"}, Shape{2, 2, "q8"},
                                           Shape{2, 2, "q4"}, Shape{2, 2, "sparse"},
                                           Shape{2, 2, "auto"}, Shape{3, 2, "none"},
                                           Shape{3, 2, "q8"}, Shape{2, 4, "none"},
                                           Shape{2, 4, "q8"}),
                         [](const auto& info) {
                           return info.param.codec + "_" + std::to_string(info.param.nodes) + "x" +
                                  std::to_string(info.param.per_node);
                         });

TEST(HierarchySegments, ManySegmentsOverlapTheNodesExchangesWithTheRail) {
  // 4 KiB slices: segments of 2 slices per node rank, so 262147 elements make 64 segments whose
  // exchanges in the node run while the rail reduces the next one.
  for (const std::string codec : {"none", "q8"}) {
    Outcome o =
        run("matrix", 4, by_node(2), {"SKETCHCCL_CODEC=" + codec, "SKETCHCCL_SLICE_BYTES=4K"},
            {data_for(codec), "2049", "262147"});
    expect_agreement(o.ranks);
  }
}

TEST(HierarchyPlacement, InterleavedRanksFormTheSameNodes) {
  // Rank r on node r % 2: each node's ranks are not neighbours in the rank order.
  Outcome o = run("matrix", 4, [](int r) { return "n" + std::to_string(r % 2); },
                  {"SKETCHCCL_CODEC=none", "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
                  {"int", "3", "100003"});
  expect_agreement(o.ranks);
  EXPECT_TRUE(logged(o, "2 nodes x 2 ranks")) << o.ranks[0].out;
}

TEST(HierarchyPlacement, UnequalNodesRunTheFlatRingAndSayWhy) {
  Outcome o = run("matrix", 4, [](int r) { return r < 3 ? "big" : "small"; },
                  {"SKETCHCCL_CODEC=q8", "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
                  {"gauss", "5", "100003"});
  expect_agreement(o.ranks);
  EXPECT_TRUE(logged(o, "2 nodes, unequal (1 to 3 ranks)")) << o.ranks[0].out;
  EXPECT_TRUE(logged(o, "flat ring")) << o.ranks[0].out;
}

TEST(HierarchyPlacement, FlatSettingKeepsOneRingOverEveryRank) {
  Outcome o = run("matrix", 4, by_node(2),
                  {"SKETCHCCL_CODEC=q8", "SKETCHCCL_HIERARCHY=flat", "SKETCHCCL_DEBUG=INFO",
                   "SKETCHCCL_DEBUG_SUBSYS=INIT"},
                  {"gauss", "100003"});
  expect_agreement(o.ranks);
  EXPECT_TRUE(logged(o, "flat ring (SKETCHCCL_HIERARCHY=flat)")) << o.ranks[0].out;
}

TEST(HierarchyPlacement, OneNodeStandaloneRunsTheFlatRing) {
  Outcome o = run("matrix", 3, [](int) { return "same"; },
                  {"SKETCHCCL_CODEC=q8", "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
                  {"gauss", "100003"});
  expect_agreement(o.ranks);
  EXPECT_TRUE(logged(o, "1 node x 3 ranks")) << o.ranks[0].out;
}

TEST(HierarchyRobustness, ALateRankIsWaitedFor) {
  Outcome o = run("matrix", 4, by_node(2), {"SKETCHCCL_CODEC=q8"}, {"gauss", "100003"}, 120,
                  [](int r) { return r == 3 ? 3 : 0; });
  expect_agreement(o.ranks);
  EXPECT_GT(o.seconds, 3);
}

TEST(HierarchyRobustness, AKilledRankGivesEveryOtherRankAnError) {
  // The last rank kills itself during the calls: the ranks of its node, of its rail and the
  // others (who wait on those) must all see an error, promptly.
  Outcome o =
      run("kill", 4, by_node(2),
          {"SKETCHCCL_CODEC=q8", "SKETCHCCL_TIMEOUT=8", "SKETCHCCL_DEBUG=NONE"}, {"1000000"}, 60);
  for (size_t r = 0; r + 1 < o.ranks.size(); ++r) {
    const auto& ro = o.ranks[r];
    EXPECT_TRUE(case_ok(ro.out, "peer-killed-gives-error")) << "rank " << r << "\n" << ro.out;
    EXPECT_TRUE(case_ok(ro.out, "abort-is-prompt")) << "rank " << r << "\n" << ro.out;
  }
  EXPECT_EQ(o.ranks.back().signal, SIGKILL);
  EXPECT_LT(o.seconds, 30);
}

double ef_mean_nmse(const Outcome& o) {
  const std::string& out = o.ranks[0].out;
  size_t at = out.find("EF_MEAN_NMSE ");
  return at == std::string::npos ? -1 : std::stod(out.substr(at + 13));
}

TEST(HierarchyRobustness, ErrorFeedbackKeepsWorkingPerBuffer) {
  const std::vector<std::string> args = {"65536", "16"};
  // 16 KiB slices: 4 segments, each with its own residual.
  Outcome plain =
      run("ef", 4, by_node(2), {"SKETCHCCL_CODEC=q4", "SKETCHCCL_SLICE_BYTES=16K"}, args);
  Outcome ef =
      run("ef", 4, by_node(2),
          {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=1", "SKETCHCCL_SLICE_BYTES=16K"}, args);
  expect_agreement(plain.ranks);
  expect_agreement(ef.ranks);
  const double a = ef_mean_nmse(plain), b = ef_mean_nmse(ef);
  std::printf("[ info ] q4, 2x2, mean of 16 calls: NMSE %.3g without, %.3g with feedback\n", a, b);
  ASSERT_GT(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_LT(b, a / 5);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t json_u64(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? 0 : std::stoull(json.substr(at + key.size() + 4));
}

// The statistics file each rank writes in a fresh folder (SKETCHCCL_STATS_FILE, given to
// `launch`), after the scenario `launch` runs; the folder is removed.
std::vector<std::string> stats_of(const std::function<Outcome(const std::string&)>& launch) {
  char dir[] = "/tmp/sketchccl_hier_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  Outcome o = launch("SKETCHCCL_STATS_FILE=" + std::string(dir) + "/stats.%p.json");
  expect_agreement(o.ranks);
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    out.push_back(read_file(entry.path()));
    std::filesystem::remove(entry.path());
  }
  std::filesystem::remove(dir);
  EXPECT_EQ(out.size(), 4u);
  return out;
}

// The statistics of each rank after one `none` AllReduce of n floats (the "big" scenario).
std::vector<std::string> stats_after_one_call(const std::string& hierarchy, size_t n) {
  return stats_of([&](const std::string& stats_file) {
    return run("big", 4, by_node(2),
               {"SKETCHCCL_CODEC=none", "SKETCHCCL_HIERARCHY=" + hierarchy,
                "SKETCHCCL_SLICE_BYTES=64K",  // 16 segments
                stats_file},
               {std::to_string(n)});
  });
}

TEST(HierarchyStats, InterNodeBytesAreTwoThirdsOfTheFlatRingsPerNode) {
  // 2 nodes x 2 ranks, n floats: the flat ring sends 2 (P-1)/P n = 1.5 n floats per rank, and
  // one rank of each node sends them across; the hierarchy's rails send 2 (N-1)/N n/L = n/2
  // floats from each rank, so each node sends n where the flat ring sent 1.5 n.
  const size_t n = 1 << 20;
  uint64_t hier_inter = 0, hier_intra = 0, flat_inter = 0;
  for (const std::string& json : stats_after_one_call("auto", n)) {
    EXPECT_NE(json.find("\"nodes\": 2, \"ranks_per_node\": 2, \"hierarchical\": true"),
              std::string::npos)
        << json;
    hier_inter += json_u64(json, "inter_node_bytes_sent");
    hier_intra += json_u64(json, "intra_node_bytes_sent");
  }
  for (const std::string& json : stats_after_one_call("flat", n)) {
    EXPECT_NE(json.find("\"hierarchical\": false"), std::string::npos) << json;
    flat_inter += json_u64(json, "inter_node_bytes_sent");
  }
  const double fb = 4.0 * n;
  EXPECT_NEAR(static_cast<double>(hier_inter), 4 * 0.5 * fb, 0.01 * fb);
  EXPECT_NEAR(static_cast<double>(flat_inter), 2 * 1.5 * fb, 0.01 * fb);
  // In a node: the reduce-scatter and all-gather send half the buffer each, from each rank.
  EXPECT_NEAR(static_cast<double>(hier_intra), 4 * 1.0 * fb, 0.01 * fb);
  std::printf("[ info ] 2x2, %zu floats: inter-node bytes %.3g hierarchical, %.3g flat (%.3f)\n", n,
              static_cast<double>(hier_inter), static_cast<double>(flat_inter),
              static_cast<double>(hier_inter) / static_cast<double>(flat_inter));
}

// ReduceScatter: each rank checks its own chunk (NCCL's layout) against the exact reduction.
Outcome run_rs(const std::string& scenario, int nranks,
               const std::function<std::string(int)>& host_of, const std::vector<std::string>& env,
               const std::vector<std::string>& args, double timeout_s = 240) {
  return run(scenario, nranks, host_of, env, args, timeout_s, nullptr, g_rs_worker);
}

class HierarchyReduceScatter : public ::testing::TestWithParam<Shape> {};

// recvcount 1, odd and large-odd, float32/16/bf16, sum and avg, in place and apart, twice each;
// `none` on integers must be exact, q8/q4 within their bounds.
TEST_P(HierarchyReduceScatter, EveryCountTypeOpAndPlacementIsNcclsLayout) {
  const Shape& s = GetParam();
  const int p = s.nodes * s.per_node;
  Outcome o =
      run_rs("matrix", p, by_node(s.per_node),
             {"SKETCHCCL_CODEC=" + s.codec, "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
             {data_for(s.codec), "1", std::to_string(2 * s.per_node + 1), "20011"});
  expect_agreement(o.ranks);
  const std::string topo = std::to_string(s.nodes) + " nodes x " + std::to_string(s.per_node) +
                           " ranks (SKETCHCCL_HOSTID=node0): hierarchical AllReduce and "
                           "ReduceScatter";
  EXPECT_TRUE(logged(o, topo)) << o.ranks[0].out;
  std::printf("[ info ] ReduceScatter %dx%d %s: %.1f s\n", s.nodes, s.per_node, s.codec.c_str(),
              o.seconds);
}

INSTANTIATE_TEST_SUITE_P(Standalone, HierarchyReduceScatter,
                         ::testing::Values(Shape{2, 2, "none"}, Shape{2, 2, "q8"},
                                           Shape{2, 2, "q4"}, Shape{2, 2, "sparse"},
                                           Shape{3, 2, "none"}, Shape{3, 2, "q8"},
                                           Shape{2, 4, "none"}, Shape{2, 4, "q4"}),
                         [](const auto& info) {
                           return info.param.codec + "_" + std::to_string(info.param.nodes) + "x" +
                                  std::to_string(info.param.per_node);
                         });

TEST(HierarchyReduceScatterSchedule, ATwoShotRailLeavesEachRankItsOwnChunk) {
  // The rail's ReduceScatter as an all-to-all (each node sum quantized once), whatever its size.
  for (const std::string codec : {"q8", "q4"}) {
    Outcome o =
        run_rs("matrix", 4, by_node(2), {"SKETCHCCL_CODEC=" + codec, "SKETCHCCL_ALGO=twoshot"},
               {"gauss", "1", "20011"});
    expect_agreement(o.ranks);
  }
}

TEST(HierarchyReduceScatterPlacement, InterleavedRanksGetTheirOwnChunks) {
  // Rank r on node r % 2: a rail's chunks are not neighbours in the input.
  for (int p : {4, 6}) {
    Outcome o =
        run_rs("matrix", p, [](int r) { return "n" + std::to_string(r % 2); },
               {"SKETCHCCL_CODEC=none", "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
               {"int", "3", "10007"});
    expect_agreement(o.ranks);
    EXPECT_TRUE(logged(o, "2 nodes x " + std::to_string(p / 2) + " ranks")) << o.ranks[0].out;
  }
}

TEST(HierarchyReduceScatterPlacement, UnequalNodesRunTheFlatRingAndSayWhy) {
  Outcome o = run_rs("matrix", 4, [](int r) { return r < 3 ? "big" : "small"; },
                     {"SKETCHCCL_CODEC=q8", "SKETCHCCL_DEBUG=INFO", "SKETCHCCL_DEBUG_SUBSYS=INIT"},
                     {"gauss", "5", "10007"});
  expect_agreement(o.ranks);
  EXPECT_TRUE(logged(o, "AllReduces and ReduceScatters run the flat ring")) << o.ranks[0].out;
}

TEST(HierarchyReduceScatterRobustness, AKilledRankGivesEveryOtherRankAnError) {
  Outcome o =
      run_rs("kill", 4, by_node(2),
             {"SKETCHCCL_CODEC=q8", "SKETCHCCL_TIMEOUT=8", "SKETCHCCL_DEBUG=NONE"}, {"300000"}, 60);
  for (size_t r = 0; r + 1 < o.ranks.size(); ++r) {
    const auto& ro = o.ranks[r];
    EXPECT_TRUE(case_ok(ro.out, "rs-peer-killed-gives-error")) << "rank " << r << "\n" << ro.out;
    EXPECT_TRUE(case_ok(ro.out, "rs-abort-is-prompt")) << "rank " << r << "\n" << ro.out;
  }
  EXPECT_EQ(o.ranks.back().signal, SIGKILL);
  EXPECT_LT(o.seconds, 30);
}

TEST(HierarchyReduceScatterRobustness, ErrorFeedbackWorksThroughTheRail) {
  const std::vector<std::string> args = {"20000", "16"};
  Outcome plain = run_rs("ef", 4, by_node(2), {"SKETCHCCL_CODEC=q4"}, args);
  Outcome ef =
      run_rs("ef", 4, by_node(2), {"SKETCHCCL_CODEC=q4", "SKETCHCCL_ERROR_FEEDBACK=1"}, args);
  expect_agreement(plain.ranks);
  expect_agreement(ef.ranks);
  const double a = ef_mean_nmse(plain), b = ef_mean_nmse(ef);
  std::printf("[ info ] ReduceScatter q4, 2x2, mean of 16 calls: NMSE %.3g without, %.3g with\n", a,
              b);
  ASSERT_GT(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_LT(b, a / 5);
}

// The statistics of each rank after one exact float32 ReduceScatter of recvcount per rank.
std::vector<std::string> rs_stats_after_one_call(const std::string& hierarchy, size_t recvcount) {
  return stats_of([&](const std::string& stats_file) {
    return run_rs("once", 4, by_node(2),
                  {"SKETCHCCL_CODEC=none", "SKETCHCCL_HIERARCHY=" + hierarchy, stats_file},
                  {std::to_string(recvcount)});
  });
}

TEST(HierarchyReduceScatterStats, InterNodeBytesAreTwoThirdsOfTheFlatRingsPerNode) {
  // 2 x 2, an input of n = 4 R floats: the flat ring sends (P-1)/P n = 0.75 n per rank, one rank
  // of each node across; in the hierarchy each rank sends its peer its rail's N R = n/2 floats,
  // and each rail's ReduceScatter of n/2 sends (N-1)/N n/2 = n/4 from each rank.
  const size_t recvcount = 1 << 18, n = 4 * recvcount;
  uint64_t hier_inter = 0, hier_intra = 0, flat_inter = 0;
  for (const std::string& json : rs_stats_after_one_call("auto", recvcount)) {
    hier_inter += json_u64(json, "inter_node_bytes_sent");
    hier_intra += json_u64(json, "intra_node_bytes_sent");
  }
  for (const std::string& json : rs_stats_after_one_call("flat", recvcount))
    flat_inter += json_u64(json, "inter_node_bytes_sent");
  const double fb = 4.0 * static_cast<double>(n);
  EXPECT_NEAR(static_cast<double>(hier_inter), 4 * 0.25 * fb, 0.01 * fb);
  EXPECT_NEAR(static_cast<double>(hier_intra), 4 * 0.5 * fb, 0.01 * fb);
  EXPECT_NEAR(static_cast<double>(flat_inter), 2 * 0.75 * fb, 0.01 * fb);
  std::printf(
      "[ info ] ReduceScatter 2x2, input %zu floats: inter-node bytes %.3g hierarchical, "
      "%.3g flat (%.3f)\n",
      n, static_cast<double>(hier_inter), static_cast<double>(flat_inter),
      static_cast<double>(hier_inter) / static_cast<double>(flat_inter));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s PATH_TO_nccl_worker PATH_TO_reduce_scatter_worker [gtest flags]\n",
                 argv[0]);
    return 2;
  }
  g_worker = argv[1];
  g_rs_worker = argv[2];
  return RUN_ALL_TESTS();
}
