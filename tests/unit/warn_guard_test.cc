// The guard itself: WARNs of any thread are collected unless an allowance in force matches.
// (That a collected WARN fails the test at its end is seen by running a test without one.)
#include "tests/unit/warn_guard.h"

#include <gtest/gtest.h>

#include <thread>

#include "src/core/log.h"

namespace sketchccl::testutil {
namespace {

TEST(WarnGuard, CollectsWarningsOfOtherThreadsThatNoAllowanceMatches) {
  AllowWarnings allow("expected one");
  std::thread([] {
    SCCL_WARN(kLogProxy, "the expected one");
    SCCL_WARN(kLogProxy, "a surprise");
  }).join();
  SCCL_INFO(kLogProxy, "info is never collected");
  std::vector<std::string> got = take_unexpected_warnings();  // taken: they fail nothing now
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("SKETCHCCL WARN PROXY a surprise"), std::string::npos) << got[0];
  EXPECT_NE(got[0].find("warn_guard_test.cc:"), std::string::npos) << got[0];
  EXPECT_EQ(allow.count(), 1);
  EXPECT_TRUE(allow.wait_for(1, 0));
  EXPECT_FALSE(allow.wait_for(2, 0.01));
}

TEST(WarnGuard, AnAllowanceEndsWithItsScope) {
  {
    AllowWarnings allow("scoped");
    SCCL_WARN(kLogColl, "scoped, allowed");
  }
  SCCL_WARN(kLogColl, "scoped, no longer allowed");
  std::vector<std::string> got = take_unexpected_warnings();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("no longer allowed"), std::string::npos) << got[0];
}

}  // namespace
}  // namespace sketchccl::testutil
