#include "src/core/log.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "src/core/config.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl {
namespace {

using testutil::AllowWarnings;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/sketchccl_log_test_" + std::to_string(getpid()) + ".log";
    std::remove(path_.c_str());
  }
  void TearDown() override {
    log_configure_raw(LogLevel::kWarn, kLogAll, "");
    std::remove(path_.c_str());
  }
  std::string path_;
};

TEST_F(LogTest, LevelsAndSubsystemsFilter) {
  AllowWarnings allow("warn always shown");
  log_configure_raw(LogLevel::kInfo, kLogNet, path_);
  SCCL_INFO(kLogNet, "net info %d", 1);
  SCCL_INFO(kLogColl, "coll info hidden");
  SCCL_TRACE(kLogNet, "trace hidden");
  SCCL_WARN(kLogColl, "warn always shown");
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  std::string text = read_all(path_);
  EXPECT_NE(text.find("SKETCHCCL INFO NET net info 1"), std::string::npos) << text;
  EXPECT_NE(text.find("SKETCHCCL WARN COLL warn always shown"), std::string::npos) << text;
  EXPECT_EQ(text.find("hidden"), std::string::npos) << text;
  EXPECT_EQ(allow.count(), 1);
}

TEST_F(LogTest, WarnLinesNameFileAndLine) {
  AllowWarnings allow("located");
  log_configure_raw(LogLevel::kInfo, kLogAll, path_);
  const int line = __LINE__ + 1;
  SCCL_WARN(kLogNet, "located %d", 7);
  SCCL_INFO(kLogNet, "info has no location");
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  std::string text = read_all(path_);
  // "host:pid:tid log_test.cc:123 SKETCHCCL WARN NET located 7", as NCCL's WARN lines.
  std::string where = ":" + std::to_string(syscall(SYS_gettid)) +
                      " log_test.cc:" + std::to_string(line) + " SKETCHCCL WARN NET located 7\n";
  EXPECT_NE(text.find(where), std::string::npos) << text;
  EXPECT_NE(text.find(":" + std::to_string(syscall(SYS_gettid)) +
                      " SKETCHCCL INFO NET info has no location\n"),
            std::string::npos)
      << text;
}

std::vector<std::string>* g_hooked = nullptr;
void record_warn(const char* line) {
  g_hooked->emplace_back(line);
}

TEST_F(LogTest, WarnHookSeesWarningsOfEveryThreadWhateverTheLevel) {
  std::vector<std::string> seen;
  g_hooked = &seen;
  LogWarnHook previous = log_set_warn_hook(&record_warn);
  log_configure_raw(LogLevel::kNone, kLogAll, path_);
  std::thread([] { SCCL_WARN(kLogProxy, "from another thread"); }).join();
  SCCL_INFO(kLogProxy, "not a warning");
  log_set_warn_hook(previous);
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find(" SKETCHCCL WARN PROXY from another thread"), std::string::npos);
  EXPECT_EQ(seen[0].back(), 'd');  // no newline
  EXPECT_EQ(read_all(path_), "");  // NONE still silences the file
}

TEST_F(LogTest, LineCarriesHostPidAndThread) {
  log_configure_raw(LogLevel::kTrace, kLogAll, path_);
  SCCL_TRACE(kLogInit, "hello");
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string expected = std::string(host) + ":" + std::to_string(getpid()) + ":";
  std::string text = read_all(path_);
  EXPECT_EQ(text.rfind(expected, 0), 0u) << text;
  EXPECT_NE(text.find(" SKETCHCCL TRACE INIT hello\n"), std::string::npos) << text;
}

TEST_F(LogTest, NoneSilencesEvenWarnings) {
  AllowWarnings allow("not written");
  log_configure_raw(LogLevel::kNone, kLogAll, path_);
  SCCL_WARN(kLogInit, "not written");
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  EXPECT_EQ(read_all(path_), "");
}

TEST_F(LogTest, ConcurrentLinesAreNeverInterleaved) {
  log_configure_raw(LogLevel::kInfo, kLogAll, path_);
  constexpr int kThreads = 8, kLines = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kLines; ++i)
        SCCL_INFO(kLogColl, "thread %d line %d end", t, i);
    });
  }
  for (auto& th : threads)
    th.join();
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  std::ifstream in(path_);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    ASSERT_NE(line.find("SKETCHCCL INFO COLL thread "), std::string::npos) << line;
    ASSERT_EQ(line.substr(line.size() - 4), " end") << line;
  }
  EXPECT_EQ(n, kThreads * kLines);
}

TEST_F(LogTest, ConfigureFromConfigWithFilePattern) {
  ConfigSources src;
  std::string pattern = "/tmp/sketchccl_log_test_%p.log";
  src.env = {{"SKETCHCCL_DEBUG", "INFO"},
             {"SKETCHCCL_DEBUG_SUBSYS", "^CODEC"},
             {"SKETCHCCL_DEBUG_FILE", pattern}};
  Config cfg = Config::load(src);
  ASSERT_TRUE(cfg.errors().empty());
  log_configure(cfg);
  SCCL_INFO(kLogCodec, "codec excluded");
  SCCL_INFO(kLogBoot, "boot included");
  log_configure_raw(LogLevel::kWarn, kLogAll, "");
  std::string text = read_all(path_);  // %p expanded to this pid == path_
  EXPECT_NE(text.find("INFO BOOT boot included"), std::string::npos) << text;
  EXPECT_EQ(text.find("codec excluded"), std::string::npos) << text;
}

}  // namespace
}  // namespace sketchccl
