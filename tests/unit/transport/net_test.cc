// Socket helpers: NCCL_SOCKET_IFNAME-style matching, address encoding, loopback selection.
#include "transport/socket/net.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

using namespace sketchccl;
using namespace sketchccl::transport::net;

namespace {

TEST(Net, IfnameMatchesLikeNccl) {
  EXPECT_TRUE(ifname_matches("eth", "eth0"));
  EXPECT_TRUE(ifname_matches("ib,eth", "eth1"));
  EXPECT_FALSE(ifname_matches("ib", "eth0"));
  EXPECT_FALSE(ifname_matches("=eth", "eth0"));
  EXPECT_TRUE(ifname_matches("=eth0", "eth0"));
  EXPECT_FALSE(ifname_matches("^lo,docker", "lo"));
  EXPECT_FALSE(ifname_matches("^lo,docker", "docker0"));
  EXPECT_TRUE(ifname_matches("^lo,docker", "eth0"));
  EXPECT_TRUE(ifname_matches("^=lo", "lo0"));
  EXPECT_FALSE(ifname_matches("^=lo", "lo"));
  EXPECT_TRUE(ifname_matches("lo:1234", "lo"));
}

TEST(Net, LoopbackIpv4AndIpv6RoundTrip) {
  SockAddr a;
  std::string ifname;
  ASSERT_TRUE(choose_local_address("lo", AF_INET, &a, &ifname).ok());
  EXPECT_EQ(ifname, "lo");
  EXPECT_EQ(a.to_string().rfind("127.", 0), 0u) << a.to_string();
  a.set_port(4242);
  uint8_t enc[kEncodedAddrBytes];
  encode_addr(a, enc);
  SockAddr b;
  ASSERT_TRUE(decode_addr(enc, sizeof enc, &b).ok());
  EXPECT_EQ(b.to_string(), a.to_string());
  SockAddr v6;
  if (choose_local_address("lo", AF_INET6, &v6, nullptr).ok()) {
    v6.set_port(1);
    encode_addr(v6, enc);
    ASSERT_TRUE(decode_addr(enc, sizeof enc, &b).ok());
    EXPECT_EQ(b.to_string(), "[::1]:1");
  }
}

TEST(Net, BadAddressesAndInterfacesAreErrors) {
  uint8_t enc[kEncodedAddrBytes] = {9, 0, 1};
  SockAddr b;
  EXPECT_FALSE(decode_addr(enc, sizeof enc, &b).ok());
  enc[0] = 4;
  enc[2] = 0;  // port 0
  EXPECT_FALSE(decode_addr(enc, sizeof enc, &b).ok());
  EXPECT_FALSE(decode_addr(enc, 3, &b).ok());
  Status st = choose_local_address("=no-such-interface", 0, &b, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SKETCHCCL_SOCKET_IFNAME"), std::string::npos) << st.message();
}

TEST(Net, ConnectToClosedPortFailsAndTimesOut) {
  SockAddr a;
  ASSERT_TRUE(choose_local_address("lo", AF_INET, &a, nullptr).ok());
  // A port bound but not listening: connections are refused, and (unlike a closed listener's
  // port) no other test running at the same time can take it meanwhile.
  Fd held(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(held.get(), 0);
  ASSERT_EQ(::bind(held.get(), reinterpret_cast<const sockaddr*>(&a.ss), a.len), 0);
  SockAddr bound = a;
  sockaddr_storage got{};
  socklen_t got_len = sizeof got;
  ASSERT_EQ(::getsockname(held.get(), reinterpret_cast<sockaddr*>(&got), &got_len), 0);
  bound.ss = got;
  bound.len = got_len;
  Fd fd;
  Status st = connect_to(bound, now_s() + 0.3, false, &fd);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  double t0 = now_s();
  st = connect_to(bound, now_s() + 0.3, true, &fd);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("timeout"), std::string::npos) << st.message();
  EXPECT_LT(now_s() - t0, 1.0);
}

// A connected stream caps TCP's retransmission back-off where the kernel has TCP_RTO_MAX_MS, so
// that a stream stalled by a link outage resumes soon after the link returns.
TEST(Net, ConnectedStreamsCapTheRetransmissionBackoff) {
  SockAddr a;
  ASSERT_TRUE(choose_local_address("lo", AF_INET, &a, nullptr).ok());
  a.set_port(0);
  Fd listener;
  SockAddr bound;
  ASSERT_TRUE(listen_on(a, 4, &listener, &bound).ok());
  Fd fd;
  ASSERT_TRUE(connect_to(bound, now_s() + 5, false, &fd).ok());
  Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
  bool kernel_can = tune_stream(probe.get());
  int cap = -1;
  socklen_t len = sizeof cap;
  int rc = ::getsockopt(fd.get(), IPPROTO_TCP, 44 /* TCP_RTO_MAX_MS */, &cap, &len);
  if (!kernel_can) {
    EXPECT_NE(rc, 0) << "the kernel refused the cap on one socket and took it on another";
    GTEST_SKIP() << "this kernel has no TCP_RTO_MAX_MS (Linux 6.15+)";
  }
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cap, kRetransmitCapMs);
}

}  // namespace
