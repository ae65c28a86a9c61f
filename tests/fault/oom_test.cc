// Out of memory is an error, never an abort: one rank's address space is limited (RLIMIT_AS)
// before a 256 MiB standalone AllReduce; that rank must get ncclSystemError naming what could not
// be allocated, the other ranks an error while it is still alive (from SketchCCL closing its
// communicator, not from the process exiting) and well before their timeout, and no process may
// die of a signal. RLIMIT_AS does not work under ASan: this test is in the normal build only.
#include <gtest/gtest.h>
#include <nccl.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/api/agreement.h"

namespace {

std::string g_worker;  // path of oom_worker, from argv

constexpr int kRanks = 3;
constexpr int kLimited = 1;
constexpr size_t kCount = size_t{64} << 20;  // 256 MiB of floats
// The ranks' own timeout is 60 s. A peer's delay includes its own work on 256 MiB before it
// next touches the transport (seconds on a loaded machine); the limited rank's close is at once.
constexpr double kPromptSeconds = 30;

struct Result {
  int rc = -1;
  double seconds = -1;
  double at = -1;  // when the call returned (seconds since the epoch)
  std::string error;
};

Result result_of(const std::string& out) {
  Result r;
  const size_t at = out.find("RESULT ");
  if (at == std::string::npos) return r;
  int rank = 0;
  std::sscanf(out.c_str() + at, "RESULT rank=%d rc=%d seconds=%lf at=%lf", &rank, &r.rc, &r.seconds,
              &r.at);
  const size_t e = out.find("error=", at);
  if (e != std::string::npos) r.error = out.substr(e + 6, out.find('\n', e) - e - 6);
  return r;
}

class OutOfMemory : public ::testing::TestWithParam<std::string> {};

TEST_P(OutOfMemory, LimitedRankGetsSystemErrorOthersFailPromptly) {
  const std::string codec = GetParam();
  char dir[] = "/tmp/sketchccl-oom-XXXXXX";  // where the peers say they have returned
  ASSERT_NE(mkdtemp(dir), nullptr);
  sketchccl::testing::Outcome o = sketchccl::testing::run_scenario(
      g_worker, "allreduce", kRanks,
      {"SKETCHCCL_CODEC=" + codec, "SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_MIN_BYTES=0",
       "SKETCHCCL_TIMEOUT=60", "SKETCHCCL_TRANSPORT=socket", std::string("OOM_DONE_DIR=") + dir},
      {std::to_string(kLimited), "48", std::to_string(kCount)}, 150);
  for (int r = 0; r < kRanks; ++r)
    (void)std::remove((std::string(dir) + "/done." + std::to_string(r)).c_str());
  (void)rmdir(dir);
  // The limited rank's error, the clock the others' promptness is measured from; it lives on
  // until they have all returned, so none of them failed because it exited.
  const double failed_at = result_of(o.ranks[kLimited].out).at;
  int peers_done = -1;
  const size_t stayed = o.ranks[kLimited].out.find("STAYED ");
  if (stayed != std::string::npos)
    std::sscanf(o.ranks[kLimited].out.c_str() + stayed, "STAYED peers_done=%d", &peers_done);
  EXPECT_EQ(peers_done, kRanks - 1) << "a peer returned only after the limited rank had exited";
  for (int r = 0; r < kRanks; ++r) {
    const sketchccl::testing::RankOutput& ro = o.ranks[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r) + " output:\n" + ro.out);
    EXPECT_EQ(ro.signal, 0) << "killed by signal " << ro.signal;
    EXPECT_EQ(ro.exit_code, 0);
    const Result res = result_of(ro.out);
    std::printf("[ info ] %s rank %d: rc %d after %.2f s (%+.2f s from the limited rank's): %s\n",
                codec.c_str(), r, res.rc, res.seconds, res.at - failed_at, res.error.c_str());
    EXPECT_NE(res.rc, static_cast<int>(ncclSuccess));
    if (r == kLimited) {
      EXPECT_EQ(res.rc, static_cast<int>(ncclSystemError));
      EXPECT_NE(res.error.find("out of memory"), std::string::npos) << res.error;
    } else {
      EXPECT_GE(res.at, 0);
      EXPECT_LT(res.at - failed_at, kPromptSeconds) << "a peer of the failed rank waited";
    }
  }
  std::printf("[ info ] %s: %.1f s\n", codec.c_str(), o.seconds);
}

INSTANTIATE_TEST_SUITE_P(Standalone, OutOfMemory, ::testing::Values("sparse", "q8", "none"));

// Out of memory in ncclCommInitRank: that rank says so, and the root, told, fails the others at
// once (not after 0.8 x their 60 s timeout).
TEST(OutOfMemoryAtInit, LimitedRankSaysSoOthersFailPromptly) {
  sketchccl::testing::Outcome o = sketchccl::testing::run_scenario(
      g_worker, "init", kRanks,
      {"SKETCHCCL_NCCL_LIB=none", "SKETCHCCL_TIMEOUT=60", "SKETCHCCL_TRANSPORT=socket"},
      {std::to_string(kLimited), "2", "0"}, 150);
  for (int r = 0; r < kRanks; ++r) {
    const sketchccl::testing::RankOutput& ro = o.ranks[static_cast<size_t>(r)];
    SCOPED_TRACE("rank " + std::to_string(r) + " output:\n" + ro.out);
    EXPECT_EQ(ro.signal, 0) << "killed by signal " << ro.signal;
    EXPECT_EQ(ro.exit_code, 0);
    const Result res = result_of(ro.out);
    std::printf("[ info ] init rank %d: rc %d after %.2f s: %s\n", r, res.rc, res.seconds,
                res.error.c_str());
    EXPECT_NE(res.rc, static_cast<int>(ncclSuccess));
    if (r == kLimited) {
      EXPECT_EQ(res.rc, static_cast<int>(ncclSystemError));
      EXPECT_NE(res.error.find("out of memory"), std::string::npos) << res.error;
    } else {
      EXPECT_GE(res.seconds, 0);
      EXPECT_LT(res.seconds, kPromptSeconds) << "a rank waited for the one that could not come";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OOM_WORKER\n", argv[0]);
    return 2;
  }
  g_worker = argv[1];
  return RUN_ALL_TESTS();
}
