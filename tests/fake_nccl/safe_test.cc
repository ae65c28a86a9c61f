// Runs safe_client (linked against a fake NCCL) in two processes under LD_PRELOAD=libsketchccl.so
// and checks its CHECK lines and, for the per-call log, its stderr: preloading the library in
// front of a program that links NCCL itself must never change what that program sees.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/api/launcher.h"

namespace {

std::string g_client, g_linked_client, g_shim, g_fake, g_fake_cuda;

struct Result {
  int fails = 0;
  int checks = 0;
  std::vector<std::string> outs;
  std::string text;
};

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

// `env` goes through env(1), so that it replaces what the test runner set (LD_LIBRARY_PATH).
Result run(const std::string& client, const std::string& mode, std::vector<std::string> env) {
  char dir[] = "/tmp/sketchccl_safe_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  const int nranks = 2;
  auto outs = sketchccl::testing::run_ranks(
      nranks,
      [&](int r) {
        std::vector<std::string> argv{"/usr/bin/env"};
        argv.insert(argv.end(), env.begin(), env.end());  // env(1)'s -u options come first
        argv.push_back("FAKE_NCCL_LOG=" + d + "/log." + std::to_string(r));
        // A node per rank: ranks on one node forward everything (docs/hierarchy.md).
        argv.push_back("SKETCHCCL_HOSTID=safehost" + std::to_string(r));
        for (const std::string& a :
             {client, std::to_string(r), std::to_string(nranks), d + "/id", mode})
          argv.push_back(a);
        return argv;
      },
      {"SKETCHCCL_TIMEOUT=30", "SKETCHCCL_CODEC=q8"}, 120);
  Result res;
  for (size_t r = 0; r < outs.size(); ++r) {
    res.outs.push_back(outs[r].out);
    res.text += "--- rank " + std::to_string(r) + " (exit " + std::to_string(outs[r].exit_code) +
                ", signal " + std::to_string(outs[r].signal) + ")\n" + outs[r].out;
    if (outs[r].exit_code != 0) res.fails++;
    res.checks += static_cast<int>(count_of(outs[r].out, "CHECK "));
    res.fails += static_cast<int>(count_of(outs[r].out, " FAIL"));
  }
  std::filesystem::remove_all(d);
  return res;
}

std::vector<std::string> preloaded(const std::string& extra_preload = "") {
  return {"LD_PRELOAD=" + g_shim + (extra_preload.empty() ? "" : " " + extra_preload),
          "SKETCHCCL_NCCL_LIB=" + g_fake};
}

// Any doubt forwards: memory SketchCCL cannot classify (unreadable, or CUDA's query failed) and
// device memory without a CUDA backend are forwarded, never read; the doubt is WARNed once.
TEST(SafeDropIn, MemoryThatCannotBeClassifiedIsForwardedAndNeverRead) {
  Result r = run(g_client, "memory", preloaded(g_fake_cuda));
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GE(r.checks, 2 * 8) << r.text;
  for (const std::string& out : r.outs)
    EXPECT_EQ(count_of(out, "cannot be classified"), 1u) << r.text;
}

// Standalone: host memory positively, device memory only with a CUDA backend, else an error.
TEST(SafeDropIn, StandaloneRefusesMemoryItCannotRun) {
  Result r = run(g_client, "standalone",
                 {"LD_PRELOAD=" + g_shim + " " + g_fake_cuda, "SKETCHCCL_NCCL_LIB=none"});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GE(r.checks, 2 * 6) << r.text;
}

// PyTorch's watchdog asks ncclGetLastError on its own thread.
TEST(SafeDropIn, LastErrorTextIsRightOnAnyThread) {
  Result r = run(g_client, "lasterror", preloaded());
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GE(r.checks, 2 * 5) << r.text;
}

TEST(SafeDropIn, GroupSimulateEndEndsTheGroupAndRunsNothing) {
  Result r = run(g_client, "simulate", preloaded());
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GE(r.checks, 2 * 5) << r.text;
}

// NCCL's "AllReduce: opCount ..." lines, at INFO for the COLL subsystem only.
TEST(SafeDropIn, PerCallLogSaysWhatHappenedToEachCall) {
  std::vector<std::string> env = preloaded();
  env.push_back("SKETCHCCL_DEBUG=INFO");
  env.push_back("SKETCHCCL_DEBUG_SUBSYS=COLL");
  Result r = run(g_client, "calllog", env);
  EXPECT_EQ(r.fails, 0) << r.text;
  int expected = 0;
  for (const std::string& out : r.outs) {
    size_t pos = 0;
    while ((pos = out.find("EXPECT_LOG ", pos)) != std::string::npos) {
      const size_t eol = out.find('\n', pos);
      const std::string want = out.substr(pos + 11, eol - pos - 11);
      pos = eol;
      ++expected;
      EXPECT_EQ(count_of(out, "SKETCHCCL INFO COLL " + want), 1u) << want << "\n" << r.text;
    }
  }
  EXPECT_EQ(expected, 2 * 7) << r.text;
  // INFO without COLL in the subsystems (the default): no per-call lines.
  env.pop_back();
  r = run(g_client, "calllog", env);
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_EQ(count_of(r.text, ": opCount "), 2u * 7) << r.text;  // the EXPECT_LOG lines only
}

// NCCL linked into the program under another name (static NCCL inside libtorch_cuda.so,
// Horovod): found with dlsym(RTLD_NEXT), with no SKETCHCCL_NCCL_LIB and no libnccl.so.2 around.
TEST(SafeDropIn, RealNcclLinkedUnderAnotherNameIsFoundWithRtldNext) {
  Result r = run(g_linked_client, "linked",
                 {"-u", "LD_LIBRARY_PATH", "-u", "SKETCHCCL_NCCL_LIB", "LD_PRELOAD=" + g_shim});
  EXPECT_EQ(r.fails, 0) << r.text;
  EXPECT_GE(r.checks, 2 * 6) << r.text;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s CLIENT LINKED_CLIENT LIBSKETCHCCL FAKE_LIBNCCL FAKE_LIBCUDA\n",
                 argv[0]);
    return 2;
  }
  g_client = argv[1];
  g_linked_client = argv[2];
  g_shim = argv[3];
  g_fake = argv[4];
  g_fake_cuda = argv[5];
  return RUN_ALL_TESTS();
}
