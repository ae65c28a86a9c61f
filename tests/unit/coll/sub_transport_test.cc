// SubTransport (hierarchy.h) carries its inner transport's waiting: over sockets with
// SKETCHCCL_WAIT=block, a rail ring's or a node phase's Exchange sleeps in the transport (few
// passes, little CPU) rather than polling, and the link report names the inner peer's link.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/coll/exchange.h"
#include "src/coll/hierarchy.h"
#include "transport/transport.h"

namespace sketchccl::coll {
namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Ranks 0 and 1 of a socket transport, connected, with SKETCHCCL_WAIT = `wait`.
void connect_pair(const std::string& wait, std::unique_ptr<transport::Transport>* a,
                  std::unique_ptr<transport::Transport>* b) {
  transport::TransportOptions o;
  o.kind = "socket";
  o.nranks = 2;
  o.wait = wait;
  o.timeout_s = 60;  // the Exchange's timeout, not the transport's, ends the waits below
  o.rank = 0;
  ASSERT_TRUE(transport::create_transport(o, a).ok());
  o.rank = 1;
  ASSERT_TRUE(transport::create_transport(o, b).ok());
  ASSERT_TRUE((*a)->connect(1, (*b)->address()).ok());
  ASSERT_TRUE((*b)->connect(0, (*a)->address()).ok());
}

// Counts the passes a waiter makes over the transport (its progress calls).
class CountingTransport : public SubTransport {
 public:
  CountingTransport(transport::Transport* inner, const std::vector<int>& members)
      : SubTransport(inner, members) {}
  Status progress() override {
    ++passes;
    return SubTransport::progress();
  }
  long passes = 0;
};

TEST(SubTransport, ForwardsCanBlockAndLinkReport) {
  std::unique_ptr<transport::Transport> a, b;
  connect_pair("block", &a, &b);
  const std::vector<int> just_peer = {1};  // sub-rank 0 is rank 1 of the inner transport
  SubTransport sub(a.get(), just_peer);
  EXPECT_TRUE(sub.can_block());
  const transport::LinkReport inner = a->link_report(1);
  ASSERT_FALSE(inner.path.empty());
  EXPECT_EQ(sub.link_report(0).path, inner.path);

  // Nothing arrives: the wait sleeps its whole span in the transport.
  const auto t0 = Clock::now();
  ASSERT_TRUE(sub.wait_for_events(0.2).ok());
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.15);

  std::unique_ptr<transport::Transport> c, d;
  connect_pair("spin", &c, &d);
  SubTransport spinning(c.get(), just_peer);
  EXPECT_FALSE(spinning.can_block());
  a->close();
  b->close();
  c->close();
  d->close();
}

TEST(SubTransport, AnExchangeOverItSleepsUntilTheTimeout) {
  std::unique_ptr<transport::Transport> a, b;
  connect_pair("block", &a, &b);
  const std::vector<int> members = {0, 1};
  CountingTransport sub(a.get(), members);
  CommLink link;
  link.transport = &sub;
  link.rank = 0;
  link.nranks = 2;
  link.timeout_s = 0.5;
  uint64_t got = 0;
  const auto t0 = Clock::now();
  const double cpu0 = thread_cpu_s();
  Status st;
  {
    Exchange ex(link, "the test's exchange");
    ASSERT_TRUE(ex.recv(1, 7, &got, sizeof got).ok());
    st = ex.wait_all();  // rank 1 never sends
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = thread_cpu_s() - cpu0;
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SKETCHCCL_TIMEOUT"), std::string::npos) << st.to_string();
  EXPECT_GE(wall, 0.45);
  // Sleeping in the transport: a pass every few milliseconds. Polling makes thousands (spins,
  // yields, then 50 us sleeps) and spends a larger share of the wall time on the CPU.
  EXPECT_LT(sub.passes, 1000) << "passes over the transport in " << wall << " s";
  EXPECT_LT(cpu, 0.25 * wall) << "CPU " << cpu << " s of " << wall << " s";
  b->close();
}

}  // namespace
}  // namespace sketchccl::coll
