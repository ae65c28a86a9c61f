// Runs device_client (SketchCCL's layers and a model of the device, in front of the fake
// libnccl.so.2 or standalone) in two processes, one node each, and checks every CHECK line it
// prints and how many WARNs SketchCCL wrote.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace {

std::string g_client, g_fake;
std::string g_fake_2_29;  // the fake as NCCL 2.29.7 (suspend)

struct Result {
  int fails = 0;
  int checks = 0;
  std::vector<int> warns;  // per rank
  std::string text;
};

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size())
    ++n;
  return n;
}

// Rank r's host: its own by default (one rank per node).
std::string own_host(int r) {
  return "devicehost" + std::to_string(r);
}

Result run(const std::string& mode, const std::vector<std::string>& env, bool standalone = false,
           int kRanks = 2, std::function<std::string(int)> host = own_host,
           const std::string& fake = g_fake) {
  char dir[] = "/tmp/sketchccl_device_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::vector<std::string> all = env;
  all.push_back("SKETCHCCL_NCCL_LIB=" + (standalone ? std::string("none") : fake));
  all.push_back("SKETCHCCL_TIMEOUT=20");
  all.push_back("SKETCHCCL_CODEC=none");
  all.push_back("SKETCHCCL_MIN_BYTES=0");
  auto outs = sketchccl::testing::run_ranks(
      kRanks,
      [&](int r) {
        return std::vector<std::string>{"/usr/bin/env",
                                        "FAKE_NCCL_LOG=" + d + "/log." + std::to_string(r),
                                        "SKETCHCCL_HOSTID=" + host(r),
                                        g_client,
                                        std::to_string(r),
                                        std::to_string(kRanks),
                                        d + "/id",
                                        mode};
      },
      all, 90);
  Result res;
  for (size_t r = 0; r < outs.size(); ++r) {
    res.text += "--- rank " + std::to_string(r) + " (exit " + std::to_string(outs[r].exit_code) +
                ", signal " + std::to_string(outs[r].signal) + ")\n" + outs[r].out;
    if (outs[r].exit_code != 0) res.fails++;
    res.warns.push_back(count(outs[r].out, "SKETCHCCL WARN"));
    size_t pos = 0;
    while ((pos = outs[r].out.find("CHECK ", pos)) != std::string::npos) {
      res.checks++;
      const size_t eol = outs[r].out.find('\n', pos);
      if (outs[r].out.substr(pos, eol - pos).find(" FAIL") != std::string::npos) res.fails++;
      pos = eol;
    }
  }
  std::filesystem::remove_all(d);
  return res;
}

// nccl-tests initialises every rank inside a group, where NCCL's ncclCommCuDevice answers 0 until
// the group ends: the device path must be prepared and staged on the caller's current device (1
// here), and the proxy makes no device runtime call.
TEST(DevicePath, AnInitInsideAGroupTakesTheCallersCurrentDevice) {
  Result r = run("group", {"MODEL_DEVICE=1"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 7) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
}

// A nonblocking communicator is not asked about while NCCL initialises it.
TEST(DevicePath, ANonblockingInitIsNotProbedWhileInitialising) {
  Result r = run("nonblocking", {"MODEL_DEVICE=1"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 8) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
}

class SetupFailure : public ::testing::TestWithParam<const char*> {};

// In front of NCCL: the call and every later device call forwarded, one WARN per rank.
TEST_P(SetupFailure, InFrontOfNcclForwardsWithOneWarn) {
  Result r = run("fail", {"MODEL_DEVICE=0", std::string("MODEL_FAIL=") + GetParam()});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 9) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({1, 1})) << r.text;
}

// Standalone: no NCCL to run the call, so the device call fails; every later one too where the
// path cannot be built or has no memory; after a failed copy the next calls run, and the
// communicator has not failed.
TEST_P(SetupFailure, StandaloneFailsEveryDeviceCall) {
  Result r = run("fail", {"MODEL_DEVICE=0", std::string("MODEL_FAIL=") + GetParam()}, true);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 7) << r.text;
}

// prepare: the flag mechanism cannot be loaded; staging: no pinned memory; copy: the first stream
// operation (the input's copy) cannot be enqueued, so the call is cancelled before the proxy ran
// it.
INSTANTIATE_TEST_SUITE_P(Kinds, SetupFailure, ::testing::Values("prepare", "staging", "copy"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// 2 nodes x 2 ranks, each node's ranks consecutive (ranks 0,1 | 2,3).
std::string by_node(int r) {
  return "rsnode" + std::to_string(r / 2);
}

// A ReduceScatter of device buffers in front of NCCL: phase 1 is one real group of N node
// ReduceScatters into a stream-ordered scratch, then the rail; exact with `none`, apart, in
// place with avg and inside a user group; the scratch goes back on the stream after the rail's
// staging copy.
TEST(DevicePath, AHierarchicalReduceScatterOfDeviceBuffersRunsNodeGroupThenRail) {
  Result r = run("hierrs", {"MODEL_DEVICE=0"}, false, 4, by_node);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 3 * 3)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0, 0, 0})) << r.text;
}

// Nodes whose ranks are not consecutive (ranks 0,2 | 1,3): no node phases, the flat ring.
TEST(DevicePath, AReduceScatterOnInterleavedNodesKeepsTheFlatRing) {
  Result r = run("hierrsflat", {"MODEL_DEVICE=0"}, false, 4,
                 [](int rank) { return "rsnode" + std::to_string(rank % 2); });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 3)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0, 0, 0})) << r.text;
}

// ncclCommSuspend gives back the device path's staging memory; ncclCommResume prepares it again
// lazily.
TEST(DevicePath, SuspendReleasesTheDeviceMemoryAndResumeRestoresItLazily) {
  Result r = run("suspend", {"MODEL_DEVICE=1"}, false, 2, own_host, g_fake_2_29);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 11) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
}

// Three communicators of a process used one after another share one pinned staging block.
TEST(DevicePath, CommunicatorsUsedOneAfterAnotherShareOnePinnedBlock) {
  Result r = run("shared", {"MODEL_DEVICE=1"}, true);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * 5) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
}

// No scratch: the call and the later ones forwarded, one WARN per rank.
TEST(DevicePath, AHierarchicalReduceScatterWithoutScratchForwardsWithOneWarn) {
  Result r = run("hierrsfail", {"MODEL_DEVICE=0", "MODEL_FAIL=alloc"}, false, 4, by_node);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 2 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({1, 1, 1, 1})) << r.text;
}

// The rail's staging copy fails after phase 1: phase 1 was enqueued all the same (the node's peers
// wait for it), the scratch goes back, the call fails, the later calls are forwarded. Two WARNs
// per rank: the call's error, and that the device calls go to NCCL from now on.
TEST(DevicePath, AHierarchicalReduceScatterWhoseRailFailsStillEnqueuedPhaseOne) {
  Result r = run("hierrsfail", {"MODEL_DEVICE=0", "MODEL_FAIL=copy"}, false, 4, by_node);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 2 + 1 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({2, 2, 2, 2})) << r.text;
}

// The GATHERHASH lines' hashes per key (a variant and the ranks that must agree).
std::map<std::string, std::set<std::string>> gather_hashes(const std::string& text) {
  std::map<std::string, std::set<std::string>> by_key;
  size_t pos = 0;
  while ((pos = text.find("GATHERHASH ", pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos);
    std::istringstream line(text.substr(pos + 11, eol - pos - 11));
    std::string name, key, hash;
    line >> name >> key >> hash;
    by_key[name + " " + key].insert(hash);
    pos = eol;
  }
  return by_key;
}

// Every key's ranks printed one hash (the same bits), `keys` keys.
void expect_same_bits(const Result& r, size_t keys) {
  const auto by_key = gather_hashes(r.text);
  EXPECT_EQ(by_key.size(), keys) << r.text;
  for (const auto& [key, hashes] : by_key)
    EXPECT_EQ(hashes.size(), 1u) << key << "\n" << r.text;
}

// SKETCHCCL_ALLGATHER_CODEC unset: an AllGather of device buffers goes to NCCL unchanged.
TEST(DevicePath, AnAllGatherWithoutItsCodecIsForwarded) {
  Result r = run("gatherunset", {"MODEL_DEVICE=0"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * (1 + 1 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
}

// Set, one rank per node: SketchCCL's compressed gather staged on the stream (apart, in place,
// in a group), no NCCL call, the same bits on both ranks, counted in the statistics.
TEST(DevicePath, AnAllGatherWithItsCodecIsStagedAndCompressed) {
  Result r = run("gather", {"MODEL_DEVICE=0", "SKETCHCCL_ALLGATHER_CODEC=q8"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 2 * (1 + 3 * 2 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0})) << r.text;
  expect_same_bits(r, 3);
}

// 2 nodes x 2 ranks, each node's ranks consecutive: the rail's compressed gather, then NCCL's
// AllGathers on the node communicator in one real group; the rail's ranks decode the same bits.
TEST(DevicePath, AHierarchicalAllGatherRunsTheRailThenNcclInTheNode) {
  Result r =
      run("hiergather", {"MODEL_DEVICE=0", "SKETCHCCL_ALLGATHER_CODEC=q8"}, false, 4, by_node);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 3 * 2 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0, 0, 0})) << r.text;
  expect_same_bits(r, 2 * 2);  // apart and grouped (in place: the fake's order, see the client)
}

// Interleaved nodes (ranks 0,2 | 1,3): SketchCCL's own node-aware gather, staged; every rank
// holds the same bits.
TEST(DevicePath, AnAllGatherOnInterleavedNodesRunsSketchcclsNodeAwareGather) {
  Result r = run("hiergatherflat", {"MODEL_DEVICE=0", "SKETCHCCL_ALLGATHER_CODEC=q8"}, false, 4,
                 [](int rank) { return "rsnode" + std::to_string(rank % 2); });
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 3 * 2 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({0, 0, 0, 0})) << r.text;
  expect_same_bits(r, 3);
}

// No scratch for the node phase: the AllGather and the later ones forwarded, one WARN per rank.
TEST(DevicePath, AHierarchicalAllGatherWithoutScratchForwardsWithOneWarn) {
  Result r =
      run("hiergatherfail", {"MODEL_DEVICE=0", "MODEL_FAIL=alloc", "SKETCHCCL_ALLGATHER_CODEC=q8"},
          false, 4, by_node);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(r.checks, 4 * (1 + 2 + 1)) << r.text;
  EXPECT_EQ(r.warns, std::vector<int>({1, 1, 1, 1})) << r.text;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DEVICE_CLIENT FAKE_LIBNCCL FAKE_LIBNCCL_2_29_7\n", argv[0]);
    return 2;
  }
  g_client = argv[1];
  g_fake = argv[2];
  g_fake_2_29 = argv[3];
  return RUN_ALL_TESTS();
}
