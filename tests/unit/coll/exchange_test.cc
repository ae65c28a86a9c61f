// The one transfer layer (exchange.h) over the socket transport, its ranks threads of this
// process: a message arrives; a receive of another size fails naming the disagreement; a receive
// with no sender, the abort flag and local work that never ends each end the wait with an error
// naming why; and a rank waiting on a blocking transport leaves its core.
#include "src/coll/exchange.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/coll/ring.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "transport/transport.h"

namespace sketchccl::coll {
namespace {

using Clock = std::chrono::steady_clock;
using testutil::loopback_transports;
using testutil::ring_link;

// The transports' own bound, far beyond the links' (the Exchange's) timeouts tested here.
constexpr double kTransportTimeoutS = 60;
constexpr uint64_t kTag = 7;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool has(const Status& st, const char* text) {
  return st.message().find(text) != std::string::npos;
}

// Rank 0 sends `sent` bytes to rank 1, which receives `expected` (exact); rank 1's status.
Status send_and_receive(size_t sent, size_t expected) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  const CommLink l0 = ring_link(t[0].get(), 0, 2, 10, 1), l1 = ring_link(t[1].get(), 1, 2, 10, 1);
  std::vector<uint8_t> out(sent, 0x5a), in(expected, 0);
  std::thread sender([&] {
    Exchange ex(l0, "a test");
    if (ex.send(1, kTag, out.data(), sent).ok()) (void)ex.wait_all();
  });
  Exchange ex(l1, "a test");
  Status st = ex.recv(0, kTag, in.data(), expected);
  if (st.ok()) st = ex.wait_all();
  sender.join();
  return st;
}

TEST(Exchange, MessageArrivesWithItsNote) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  const CommLink l0 = ring_link(t[0].get(), 0, 2, 10, 1), l1 = ring_link(t[1].get(), 1, 2, 10, 1);
  std::vector<uint8_t> out(1000), in(1000, 0);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(i * 7);
  Status sent;
  std::thread sender([&] {
    Exchange ex(l0, "a test");
    sent = ex.send(1, kTag, out.data(), out.size());
    if (sent.ok()) sent = ex.wait_all();
    EXPECT_EQ(ex.bytes_sent(), out.size());
  });
  Exchange ex(l1, "a test");
  TransferNote note;
  note.slice = 3;
  note.step = 2;
  note.cookie = 11;
  ASSERT_TRUE(ex.recv(0, kTag, in.data(), in.size(), note).ok());
  EXPECT_EQ(ex.pending(), 1u);
  std::vector<Completion> done;
  Status st = ex.wait_all(&done);
  sender.join();
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  EXPECT_EQ(ex.pending(), 0u);
  EXPECT_EQ(in, out);
  EXPECT_EQ(ex.bytes_received(), in.size());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].recv);
  EXPECT_EQ(done[0].peer, 0);
  EXPECT_EQ(done[0].bytes, in.size());
  EXPECT_EQ(done[0].note.slice, 3);
  EXPECT_EQ(done[0].note.step, 2);
  EXPECT_EQ(done[0].note.cookie, 11);
}

TEST(Exchange, ShorterMessageFailsAsADisagreementNamingThePeer) {
  Status st = send_and_receive(8, 16);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.to_string();
  EXPECT_TRUE(has(st, "disagree")) << st.to_string();
  EXPECT_TRUE(has(st, "from rank 0")) << st.to_string();
}

TEST(Exchange, LongerMessageFailsAsADisagreementNamingThePeer) {
  Status st = send_and_receive(32, 16);
  EXPECT_EQ(st.code(), Code::kInvalidUsage) << st.to_string();
  EXPECT_TRUE(has(st, "disagree")) << st.to_string();
  EXPECT_TRUE(has(st, "rank 0")) << st.to_string();
}

TEST(Exchange, ReceiveWithNoSenderTimesOutNamingThePeer) {
  auto t = loopback_transports(3, kTransportTimeoutS);
  const double timeout_s = 0.5;
  const CommLink link = ring_link(t[0].get(), 0, 3, timeout_s, 1);
  Exchange ex(link, "a test");
  uint8_t buf[16];
  TransferNote note;
  note.slice = 4;
  note.step = 1;
  ASSERT_TRUE(ex.recv(2, kTag, buf, sizeof buf, note).ok());
  const auto t0 = Clock::now();
  Status st = ex.wait_all();
  const double s = seconds_since(t0);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.to_string();
  EXPECT_TRUE(has(st, "timed out")) << st.to_string();
  EXPECT_TRUE(has(st, "SKETCHCCL_TIMEOUT")) << st.to_string();
  EXPECT_TRUE(has(st, "from rank 2")) << st.to_string();
  EXPECT_TRUE(has(st, "slice 4, step 1")) << st.to_string();
  EXPECT_GE(s, timeout_s);
  EXPECT_LT(s, timeout_s + 2.0);
}

// A shape with work of its own running (codec tickets) when the clock runs out: the error names
// that work beside the peer, since either may be what is stuck.
TEST(Exchange, TimeoutWithLocalWorkNamesItBesideThePeer) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  const CommLink link = ring_link(t[0].get(), 0, 2, 0.3, 1);
  Exchange ex(link, "a test");
  uint8_t buf[16];
  ASSERT_TRUE(ex.recv(1, kTag, buf, sizeof buf).ok());
  const auto t0 = Clock::now();
  Status st;
  while (st.ok() && seconds_since(t0) < 5) {
    st = ex.poll(nullptr);
    if (st.ok()) st = ex.idle(/*local_work=*/true);
  }
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.to_string();
  EXPECT_TRUE(has(st, "SKETCHCCL_TIMEOUT")) << st.to_string();
  EXPECT_TRUE(has(st, "its own work and a packet from rank 1")) << st.to_string();
}

TEST(Exchange, AbortFromAnotherThreadEndsTheWaitPromptly) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  std::atomic<bool> abort{false};
  CommLink link = ring_link(t[0].get(), 0, 2, 30, 1);
  link.abort = &abort;
  Exchange ex(link, "a test");
  uint8_t buf[16];
  ASSERT_TRUE(ex.recv(1, kTag, buf, sizeof buf).ok());
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abort.store(true);
  });
  const auto t0 = Clock::now();
  Status st = ex.wait_all();
  const double s = seconds_since(t0);
  aborter.join();
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.to_string();
  EXPECT_TRUE(has(st, "aborted")) << st.to_string();
  EXPECT_LT(s, 2.0);
}

TEST(Exchange, WaitLocalEndsWithTheWork) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  const CommLink link = ring_link(t[0].get(), 0, 2, 10, 1);
  Exchange ex(link, "a test");
  int polls = 0;
  Status st = ex.wait_local(
      [&](bool* done) {
        *done = ++polls == 1000;
        return Status::Ok();
      },
      "its own decodes");
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(polls, 1000);
  // The work's own error ends the wait with it.
  st = ex.wait_local([](bool*) { return Status(Code::kSystemError, "injected"); }, "its decodes");
  EXPECT_EQ(st.code(), Code::kSystemError);
}

TEST(Exchange, WaitLocalTimesOutNamingTheWork) {
  auto t = loopback_transports(2, kTransportTimeoutS);
  const double timeout_s = 0.3;
  const CommLink link = ring_link(t[0].get(), 0, 2, timeout_s, 1);
  Exchange ex(link, "a test");
  const auto t0 = Clock::now();
  Status st = ex.wait_local(
      [](bool* done) {
        *done = false;
        return Status::Ok();
      },
      "its own decodes");
  const double s = seconds_since(t0);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.to_string();
  EXPECT_TRUE(has(st, "SKETCHCCL_TIMEOUT")) << st.to_string();
  EXPECT_TRUE(has(st, "waiting for its own decodes")) << st.to_string();
  EXPECT_GE(s, timeout_s);
  EXPECT_LT(s, timeout_s + 2.0);
}

// The point of the one wait: a rank that only a peer can move on sleeps in a transport that
// can block (about 0.02 CPU seconds a second here), instead of polling on its core (the back-off
// of SKETCHCCL_WAIT=spin: about 0.2 a second here).
TEST(Exchange, WaitOnABlockingTransportLeavesTheCore) {
  auto t = loopback_transports(2, kTransportTimeoutS, "block");
  ASSERT_TRUE(t[0]->can_block());
  const double timeout_s = 1.0;
  const CommLink link = ring_link(t[0].get(), 0, 2, timeout_s, 1);
  Exchange ex(link, "a test");
  uint8_t buf[16];
  ASSERT_TRUE(ex.recv(1, kTag, buf, sizeof buf).ok());
  const double cpu0 = thread_cpu_s();
  const auto t0 = Clock::now();
  Status st = ex.wait_all();
  const double s = seconds_since(t0), cpu = thread_cpu_s() - cpu0;
  EXPECT_TRUE(has(st, "timed out")) << st.to_string();
  EXPECT_GE(s, timeout_s);
  EXPECT_LT(cpu, 0.1) << "CPU seconds spent in a wait of " << s << " s";
}

// The small all-gather over the Exchange: every rank gets every block; a rank that disagrees on
// the size fails every rank's call instead of hanging.
std::vector<Status> allgather_small(int p, const std::vector<size_t>& bytes,
                                    std::vector<std::vector<uint32_t>>* all) {
  auto t = loopback_transports(p, kTransportTimeoutS);
  std::vector<Status> st(static_cast<size_t>(p));
  all->assign(static_cast<size_t>(p), std::vector<uint32_t>(static_cast<size_t>(p) * 2, 0));
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r) {
    th.emplace_back([&, r] {
      const CommLink link = ring_link(t[static_cast<size_t>(r)].get(), r, p, 5, 3);
      const uint32_t mine[2] = {static_cast<uint32_t>(100 + r), static_cast<uint32_t>(200 + r)};
      st[static_cast<size_t>(r)] = ring_allgather_small(link, mine, bytes[static_cast<size_t>(r)],
                                                        (*all)[static_cast<size_t>(r)].data());
    });
  }
  for (auto& x : th)
    x.join();
  return st;
}

TEST(Exchange, SmallAllGatherGivesEveryRankEveryBlock) {
  const int p = 4;
  std::vector<std::vector<uint32_t>> all;
  std::vector<Status> st = allgather_small(p, std::vector<size_t>(p, 8), &all);
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)].ok()) << st[static_cast<size_t>(r)].to_string();
    for (int q = 0; q < p; ++q) {
      EXPECT_EQ(all[static_cast<size_t>(r)][static_cast<size_t>(2 * q)], uint32_t(100 + q));
      EXPECT_EQ(all[static_cast<size_t>(r)][static_cast<size_t>(2 * q + 1)], uint32_t(200 + q));
    }
  }
}

TEST(Exchange, SmallAllGatherOfDisagreeingSizesFailsEveryRank) {
  std::vector<std::vector<uint32_t>> all;
  const auto t0 = Clock::now();
  std::vector<Status> st = allgather_small(3, {8, 4, 8}, &all);
  EXPECT_LT(seconds_since(t0), 5.0 + 3.0);
  for (size_t r = 0; r < st.size(); ++r)
    EXPECT_FALSE(st[r].ok()) << "rank " << r;
  // Rank 1's neighbour on the right receives its short block.
  EXPECT_EQ(st[2].code(), Code::kInvalidUsage) << st[2].to_string();
  EXPECT_TRUE(has(st[2], "disagree")) << st[2].to_string();
}

}  // namespace
}  // namespace sketchccl::coll
