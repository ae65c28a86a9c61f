// The rendezvous with real sockets on loopback: the root listener, joins started from one
// thread, and misbehaving clients that the root must reject without falling over.
#include "src/bootstrap/bootstrap.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/bootstrap/wire.h"
#include "tests/unit/warn_guard.h"
#include "transport/socket/net.h"

using namespace sketchccl;
using namespace sketchccl::bootstrap;
namespace net = sketchccl::transport::net;
using sketchccl::testutil::AllowWarnings;

namespace {

Options opts(double timeout = 5) {
  Options o;
  o.timeout_s = timeout;
  o.ifname = "lo";
  return o;
}

struct Id {
  uint8_t b[kUniqueIdBytes];
  Id() {
    for (size_t i = 0; i < sizeof b; ++i)
      b[i] = i < kRecordOffset ? static_cast<uint8_t>(i + 1) : 0;
  }
};

transport::Blob blob_for(int rank) {
  std::string s = "address-of-rank-" + std::to_string(rank);
  return transport::Blob(s.begin(), s.end());
}

// A client speaking raw bytes to the root.
struct RawClient {
  net::Fd fd;
  std::string error;

  RawClient(const Id& id, const std::vector<uint8_t>& bytes) {
    std::vector<uint8_t> enc;
    uint64_t secret = 0;
    net::SockAddr root;
    if (!record_fields(id.b, &enc, &secret).ok() ||
        !net::decode_addr(enc.data(), enc.size(), &root).ok()) {
      error = "<bad id>";
      return;
    }
    Status st = net::connect_to(root, net::now_s() + 5, false, &fd);
    if (!st.ok()) {
      error = "<connect: " + st.message() + ">";
      return;
    }
    if (!bytes.empty()) {
      st = net::send_all(fd.get(), bytes.data(), bytes.size(), net::now_s() + 5, "raw");
      if (!st.ok()) error = "<send: " + st.message() + ">";
    }
  }

  // The root's error text, "<table>" or "<none>".
  std::string reply(double seconds = 5) {
    if (!error.empty()) return error;
    uint8_t frame[4];
    Status st = net::recv_all(fd.get(), frame, 4, net::now_s() + seconds, "reply");
    if (!st.ok()) return "<none>";
    std::vector<uint8_t> body(net::get_u32(frame));
    if (body.size() > (1u << 20)) return "<huge>";
    st = net::recv_all(fd.get(), body.data(), body.size(), net::now_s() + seconds, "reply");
    if (!st.ok()) return "<none>";
    wire::Reply rep;
    st = wire::parse_reply(body.data(), body.size(), &rep);
    if (!st.ok()) return "<unparsable: " + st.message() + ">";
    return rep.ok ? "<table>" : rep.error;
  }
};

std::string raw_client(const Id& id, const std::vector<uint8_t>& bytes, bool close_early = false) {
  RawClient c(id, bytes);
  if (close_early) return c.error.empty() ? "<closed>" : c.error;
  return c.reply();
}

std::vector<uint8_t> hello(const Id& id, uint32_t rank, uint32_t nranks, uint64_t secret_xor = 0) {
  std::vector<uint8_t> enc;
  wire::Hello h;
  EXPECT_TRUE(record_fields(id.b, &enc, &h.secret).ok());
  h.secret ^= secret_xor;
  h.rank = rank;
  h.nranks = nranks;
  h.blob = blob_for(static_cast<int>(rank));
  return wire::encode_hello(h);
}

TEST(Bootstrap, RecordLeavesNcclBytesAlone) {
  Id id;
  EXPECT_FALSE(has_record(id.b));
  ASSERT_TRUE(create_root(id.b, opts(0.5)).ok());
  for (size_t i = 0; i < kRecordOffset; ++i)
    ASSERT_EQ(id.b[i], i + 1) << i;
  EXPECT_TRUE(has_record(id.b));
  std::string d;
  ASSERT_TRUE(describe_record(id.b, &d).ok());
  EXPECT_NE(d.find("127."), std::string::npos) << d;
  // Any damage to the record is detected.
  for (size_t i = kRecordOffset; i < 88; ++i) {
    Id c = id;
    c.b[i] ^= 0x40;
    EXPECT_FALSE(has_record(c.b)) << "byte " << i;
  }
  Id zero;
  std::memset(zero.b, 0, sizeof zero.b);
  EXPECT_FALSE(has_record(zero.b));
  std::unique_ptr<Join> j;
  Status st = Join::start(zero.b, 0, 1, blob_for(0), 0, opts(), &j);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("no SketchCCL record"), std::string::npos) << st.message();
  EXPECT_EQ(Join::start(id.b, 3, 3, blob_for(0), 0, opts(), &j).code(), Code::kInvalidArgument);
  EXPECT_TRUE(release_root(id.b));  // nobody joins this id
}

TEST(Bootstrap, GroupOfRanksJoinsFromOneThread) {
  for (int n : {1, 2, 4, 8}) {
    Id id;
    ASSERT_TRUE(create_root(id.b, opts()).ok());
    std::vector<std::unique_ptr<Join>> joins(n);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(
          Join::start(id.b, r, n, blob_for(r), 1000 + (r == 2 ? 1 : 0), opts(), &joins[r]).ok());
    }
    for (int r = 0; r < n; ++r) {
      Status st;
      do {
        st = joins[r]->wait(1.0);
      } while (st.code() == Code::kInProgress);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const JoinResult& res = joins[r]->result();
      ASSERT_EQ(res.nranks, n);
      EXPECT_EQ(res.rank, r);
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(res.addresses[q], blob_for(q));
        EXPECT_EQ(res.config_hashes[q], 1000u + (q == 2 ? 1 : 0));
      }
      EXPECT_EQ(res.configs_agree(), n <= 2);
    }
  }
}

TEST(Bootstrap, RootRejectsMisbehavingClientsAndCarriesOn) {
  AllowWarnings rejected("rejected a connection from");
  Id id;
  ASSERT_TRUE(create_root(id.b, opts(10)).ok());
  // Rank 0 of 2 joins (a raw client holding its connection): the root now knows there are 2.
  RawClient r0(id, hello(id, 0, 2));
  ASSERT_EQ(r0.error, "");
  usleep(100000);
  EXPECT_NE(raw_client(id, hello(id, 1, 2, 0x5a)).find("wrong secret"), std::string::npos);
  EXPECT_NE(raw_client(id, hello(id, 0, 2)).find("duplicate rank 0"), std::string::npos);
  EXPECT_NE(raw_client(id, hello(id, 2, 2)).find("rank 2 is outside [0, 2)"), std::string::npos);
  EXPECT_NE(raw_client(id, hello(id, 7, 2)).find("outside"), std::string::npos);
  EXPECT_NE(raw_client(id, hello(id, 1, 3)).find("mismatched rank count"), std::string::npos);
  // Garbage: a plausible length, then junk; an absurd length; the wrong magic.
  std::vector<uint8_t> junk(68, 0xab);
  net::put_u32(junk.data(), 64);
  EXPECT_NE(raw_client(id, junk).find("not a SketchCCL bootstrap message"), std::string::npos);
  std::vector<uint8_t> absurd(16, 0xff);
  EXPECT_NE(raw_client(id, absurd).find("garbage"), std::string::npos);
  std::vector<uint8_t> h = hello(id, 1, 2);
  std::vector<uint8_t> cut(h.begin(), h.begin() + 20);
  net::put_u32(cut.data(), 16);  // a frame that says 16 bytes: too short for a hello
  EXPECT_NE(raw_client(id, cut).find("truncated"), std::string::npos);
  // Truncated on the wire, then gone; a stranger that says nothing; a HTTP request.
  EXPECT_EQ(raw_client(id, std::vector<uint8_t>(h.begin(), h.begin() + 30), true), "<closed>");
  EXPECT_EQ(raw_client(id, {}, true), "<closed>");
  std::string http = "GET / HTTP/1.0\r\n\r\n";
  EXPECT_NE(raw_client(id, std::vector<uint8_t>(http.begin(), http.end())), "<table>");
  // The real rank 1 still gets in, and both ranks get the table.
  std::unique_ptr<Join> r1;
  ASSERT_TRUE(Join::start(id.b, 1, 2, blob_for(1), 7, opts(10), &r1).ok());
  Status st = r1->wait(10);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r0.reply(), "<table>");
  EXPECT_EQ(r1->result().addresses[0], blob_for(0));
}

TEST(Bootstrap, RejectedJoinReportsTheReason) {
  AllowWarnings mismatch("mismatched rank count");
  AllowWarnings left("left before the table was sent");
  Id id;
  ASSERT_TRUE(create_root(id.b, opts(5)).ok());
  RawClient a(id, hello(id, 0, 2));
  ASSERT_EQ(a.error, "");
  usleep(100000);
  std::unique_ptr<Join> b;
  ASSERT_TRUE(Join::start(id.b, 1, 4, blob_for(1), 0, opts(5), &b).ok());
  Status st = b->wait(10);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("mismatched rank count"), std::string::npos) << st.message();
  a.fd = net::Fd();  // rank 0 leaves too; the root's WARN must land in this test
  EXPECT_TRUE(left.wait_for(1, 5.0));
}

TEST(Bootstrap, MissingRankTimesOutNamingIt) {
  AllowWarnings timeout("did not arrive within");
  Id id;
  ASSERT_TRUE(create_root(id.b, opts(1.0)).ok());
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Join> a, b;
  ASSERT_TRUE(Join::start(id.b, 0, 3, blob_for(0), 0, opts(1.0), &a).ok());
  ASSERT_TRUE(Join::start(id.b, 1, 3, blob_for(1), 0, opts(1.0), &b).ok());
  for (Join* j : {a.get(), b.get()}) {
    Status st = j->wait(5);
    EXPECT_EQ(st.code(), Code::kRemoteError);
    EXPECT_NE(st.message().find("timeout"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("(2)"), std::string::npos) << st.message();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.5);
}

TEST(Bootstrap, RootWaitsForTheFirstRankHoweverLate) {
  // The deadline counts from the first rank's arrival, not from the id's creation: a rank that
  // comes after SKETCHCCL_TIMEOUT has passed since the id was made still joins.
  Id id;
  ASSERT_TRUE(create_root(id.b, opts(0.3)).ok());
  usleep(800000);
  EXPECT_TRUE(root_listening(id.b));
  std::unique_ptr<Join> j;
  ASSERT_TRUE(Join::start(id.b, 0, 1, blob_for(0), 0, opts(0.3), &j).ok());
  Status st = j->wait(5);
  EXPECT_TRUE(st.ok()) << st.to_string();
  for (int i = 0; i < 100 && root_listening(id.b); ++i)
    usleep(20000);
  EXPECT_FALSE(root_listening(id.b));  // it exits once the table is sent
}

TEST(Bootstrap, ReleasedRootExitsQuietlyAndALateRankTimesOut) {
  // ncclCommInitRankScalable's extra ids: their roots stop at once, without a warning.
  AllowWarnings unreachable("cannot reach the root");
  Id id, other;
  size_t before = active_root_listeners();
  ASSERT_TRUE(create_root(id.b, opts(30)).ok());
  EXPECT_TRUE(root_listening(id.b));
  EXPECT_GE(active_root_listeners(), 1u);
  EXPECT_FALSE(release_root(other.b));  // no record: nothing to release
  EXPECT_TRUE(release_root(id.b));
  for (int i = 0; i < 100 && root_listening(id.b); ++i)
    usleep(20000);
  EXPECT_FALSE(root_listening(id.b));
  EXPECT_LE(active_root_listeners(), before);  // others may have ended meanwhile, none began
  EXPECT_FALSE(release_root(id.b));
  std::unique_ptr<Join> j;
  ASSERT_TRUE(Join::start(id.b, 0, 2, blob_for(0), 0, opts(0.5), &j).ok());
  Status st = j->wait(5);
  EXPECT_EQ(st.code(), Code::kRemoteError);
  EXPECT_NE(st.message().find("cannot reach the root"), std::string::npos) << st.message();
}

TEST(Bootstrap, SocketIfnameFallsBackToNcclSocketIfname) {
  const Config& defaults = Config::defaults();  // SKETCHCCL_SOCKET_IFNAME unset
  ASSERT_EQ(unsetenv("NCCL_SOCKET_IFNAME"), 0);
  EXPECT_EQ(socket_ifname(defaults), "");
  ASSERT_EQ(setenv("NCCL_SOCKET_IFNAME", "=lo", 1), 0);
  EXPECT_EQ(socket_ifname(defaults), "=lo");
  ConfigSources src;
  src.env["SKETCHCCL_SOCKET_IFNAME"] = "eth";
  Config own = Config::load(src);
  ASSERT_TRUE(own.status().ok()) << own.status().to_string();
  EXPECT_EQ(socket_ifname(own), "eth");  // SketchCCL's own variable wins
  ASSERT_EQ(unsetenv("NCCL_SOCKET_IFNAME"), 0);
}

TEST(Bootstrap, DestroyingAPendingJoinDoesNotBlock) {
  AllowWarnings left("left before the table was sent");
  Id id;
  ASSERT_TRUE(create_root(id.b, opts(30)).ok());
  auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_ptr<Join> j;
    ASSERT_TRUE(Join::start(id.b, 0, 2, blob_for(0), 0, opts(30), &j).ok());
    usleep(50000);
    EXPECT_FALSE(j->done());
    EXPECT_EQ(j->wait(0).code(), Code::kInProgress);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
  EXPECT_TRUE(left.wait_for(1, 5.0));  // the root saw rank 0 go
}

TEST(Bootstrap, Ipv6Loopback) {
  Options o = opts();
  o.address_family = AF_INET6;
  Id id;
  Status st = create_root(id.b, o);
  if (!st.ok()) GTEST_SKIP() << "no IPv6 on lo: " << st.message();
  std::string d;
  ASSERT_TRUE(describe_record(id.b, &d).ok());
  EXPECT_NE(d.find("[::1]"), std::string::npos) << d;
  std::unique_ptr<Join> a, b;
  ASSERT_TRUE(Join::start(id.b, 0, 2, blob_for(0), 0, o, &a).ok());
  ASSERT_TRUE(Join::start(id.b, 1, 2, blob_for(1), 0, o, &b).ok());
  ASSERT_TRUE(a->wait(10).ok());
  ASSERT_TRUE(b->wait(10).ok());
}

}  // namespace
