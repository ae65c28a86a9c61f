// A rank that cannot join (out of memory, no transport) tells the root, and the ranks waiting
// and those still coming fail at once with its reason instead of at 0.8 x the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "src/bootstrap/bootstrap.h"
#include "src/bootstrap/wire.h"
#include "tests/unit/warn_guard.h"

using namespace sketchccl;
using namespace sketchccl::bootstrap;
using sketchccl::testutil::AllowWarnings;

namespace {

Options opts(double timeout) {
  Options o;
  o.timeout_s = timeout;
  o.ifname = "lo";
  return o;
}

TEST(BootstrapAbandon, WireRoundTrip) {
  wire::Hello h;
  h.abandon = true;
  h.secret = 7;
  h.rank = 2;
  h.nranks = 3;
  const std::string why = "out of memory allocating the proxy thread";
  h.blob.assign(why.begin(), why.end());
  std::vector<uint8_t> msg = wire::encode_hello(h);
  wire::Hello back;
  ASSERT_TRUE(
      wire::parse_hello(msg.data() + wire::kFrameBytes, msg.size() - wire::kFrameBytes, &back)
          .ok());
  EXPECT_TRUE(back.abandon);
  EXPECT_EQ(back.rank, 2u);
  EXPECT_EQ(std::string(back.blob.begin(), back.blob.end()), why);
  h.abandon = false;
  msg = wire::encode_hello(h);
  ASSERT_TRUE(
      wire::parse_hello(msg.data() + wire::kFrameBytes, msg.size() - wire::kFrameBytes, &back)
          .ok());
  EXPECT_FALSE(back.abandon);
}

TEST(BootstrapAbandon, WaitingAndLateRanksFailAtOnceWithTheReason) {
  AllowWarnings expected("cannot join");
  uint8_t id[kUniqueIdBytes] = {};
  const double timeout = 30;  // the root alone would give up after 24 s
  ASSERT_TRUE(create_root(id, opts(timeout)).ok());
  std::vector<std::unique_ptr<Join>> joins(2);
  const transport::Blob blob(4, 1);
  ASSERT_TRUE(Join::start(id, 0, 3, blob, 1, opts(timeout), &joins[0]).ok());
  // Rank 0 is in (the root knows there are 3) before rank 2 gives up; rank 1 comes after.
  EXPECT_EQ(joins[0]->wait(0.5).code(), Code::kInProgress);
  const auto t0 = std::chrono::steady_clock::now();
  Status told =
      abandon(id, 2, 3, "out of memory allocating the transport (1 bytes)", opts(timeout));
  ASSERT_TRUE(told.ok()) << told.to_string();
  ASSERT_TRUE(Join::start(id, 1, 3, blob, 1, opts(timeout), &joins[1]).ok());
  for (int r = 0; r < 2; ++r) {
    Status st = joins[r]->wait(10);
    EXPECT_EQ(st.code(), Code::kRemoteError) << st.to_string();
    EXPECT_NE(st.message().find("rank 2 of 3 cannot join: out of memory"), std::string::npos)
        << st.message();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
}

}  // namespace
