// The compressed AllGather shape (coll/allgather.h), ranks as threads over loopback sockets:
// every linear codec gives the same bits on every rank, one encoding's error per shard whatever
// P, and (P - 1) packets' bytes per rank; in place; counts below a slice and zero; one rank;
// codecs that cannot gather refused; ranks that disagree on the count, or a rank that is gone,
// fail with an error instead of hanging. Node-aware: every shard in its owner's place, the same
// bits, and only the rail's compressed bytes between nodes; the rail's gather alone.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "src/coll/allgather.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::ElemType;

float value(int r, size_t i) {
  uint64_t h = (static_cast<uint64_t>(r) + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 29;
  return static_cast<float>(static_cast<double>(h % 20001) / 10000.0 - 1.0);
}

struct Gathered {
  std::vector<Status> st;
  std::vector<std::vector<float>> y;  // each rank's output
  std::vector<GatherStats> stats;
  double seconds = 0;
};

// P ranks gather `counts[r]` elements each (float32) with `codec`; `ranks_running` of them run
// (the others are gone: their transports closed).
Gathered gather(int p, CodecId codec, const std::vector<size_t>& counts, bool in_place = false,
                double timeout_s = 20, int ranks_running = -1) {
  if (ranks_running < 0) ranks_running = p;
  auto t = testutil::loopback_transports(p, timeout_s);
  for (int r = ranks_running; r < p; ++r)
    t[r]->close();
  Gathered g;
  g.st.resize(p);
  g.y.resize(p);
  g.stats.resize(p);
  std::vector<std::vector<float>> x(p);
  for (int r = 0; r < p; ++r) {
    g.y[r].assign(counts[r] * static_cast<size_t>(p), -7.0f);
    x[r].resize(counts[r]);
    for (size_t i = 0; i < counts[r]; ++i)
      x[r][i] = value(r, i);
    if (in_place) std::memcpy(g.y[r].data() + r * counts[r], x[r].data(), counts[r] * 4);
  }
  GatherSettings gs;
  gs.seed = 3;
  gs.slice_elems = 1000;  // several slices per shard
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks_running; ++r) {
    threads.emplace_back([&, r] {
      auto be = backend::make_host_backend();
      CommLink link = testutil::ring_link(t[r].get(), r, p, timeout_s, 5);
      GatherArgs a;
      a.send = in_place ? static_cast<const void*>(g.y[r].data() + r * counts[r]) : x[r].data();
      a.recv = g.y[r].data();
      a.count = counts[r];
      a.type = ElemType::kF32;
      a.codec = codec;
      g.st[r] = compressed_allgather(link, *be, a, gs, &g.stats[r]);
    });
  }
  for (auto& th : threads)
    th.join();
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

double nmse(const std::vector<float>& y, size_t count, int p) {
  double err = 0, ref = 0;
  for (int q = 0; q < p; ++q) {
    for (size_t i = 0; i < count; ++i) {
      const double d = y[q * count + i] - value(q, i);
      err += d * d;
      ref += static_cast<double>(value(q, i)) * value(q, i);
    }
  }
  return err / ref;
}

// P ranks on nodes host_of(r) gather `count` elements each (float32) node-aware, in place or not.
Gathered gather_node_aware(int p, const std::vector<uint64_t>& hosts, size_t count, bool in_place) {
  const double timeout_s = 20;
  auto t = testutil::loopback_transports(p, timeout_s);
  Gathered g;
  g.st.resize(p);
  g.y.resize(p);
  g.stats.resize(p);
  std::vector<std::vector<float>> x(p);
  for (int r = 0; r < p; ++r) {
    g.y[r].assign(count * static_cast<size_t>(p), -7.0f);
    x[r].resize(count);
    for (size_t i = 0; i < count; ++i)
      x[r][i] = value(r, i);
    if (in_place) std::memcpy(g.y[r].data() + r * count, x[r].data(), count * 4);
  }
  GatherSettings gs;
  gs.seed = 3;
  gs.slice_elems = 1000;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto be = backend::make_host_backend();
      const Topology topo = make_topology(r, hosts);
      CommLink link = testutil::ring_link(t[r].get(), r, p, timeout_s, 9);
      GatherArgs a;
      a.send = in_place ? static_cast<const void*>(g.y[r].data() + r * count) : x[r].data();
      a.recv = g.y[r].data();
      a.count = count;
      a.codec = CodecId::kQ8;
      g.st[r] = node_aware_allgather(link, topo, *be, a, gs, &g.stats[r]);
    });
  }
  for (auto& th : threads)
    th.join();
  return g;
}

TEST(NodeAwareAllGather, SameBitsEveryShardInItsPlaceOnlyTheRailCrossesNodes) {
  const size_t count = 2345;
  // 3 nodes of 2 ranks, interleaved (rank r on node r % 3), and 2 nodes of 3 placed node by node.
  for (const auto& hosts :
       {std::vector<uint64_t>{7, 8, 9, 7, 8, 9}, std::vector<uint64_t>{5, 5, 5, 6, 6, 6}}) {
    const int p = static_cast<int>(hosts.size());
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(std::to_string(hosts[1]) + (in_place ? " in place" : " apart"));
      Gathered g = gather_node_aware(p, hosts, count, in_place);
      const Topology topo = make_topology(0, hosts);
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(g.st[r].ok()) << g.st[r].to_string();
        EXPECT_EQ(std::memcmp(g.y[r].data(), g.y[0].data(), g.y[0].size() * 4), 0) << "rank " << r;
        // Along the rail: (N - 1) packets of its shard; in the node: (L - 1) · N exact shards.
        const uint64_t exact_node = static_cast<uint64_t>(topo.local_ranks - 1) *
                                    static_cast<uint64_t>(topo.nodes) * count * 4;
        EXPECT_EQ(g.stats[r].bytes_sent - g.stats[r].inter_node_bytes_sent, exact_node);
        EXPECT_LT(static_cast<double>(g.stats[r].inter_node_bytes_sent),
                  0.3 * (topo.nodes - 1) * count * 4.0);
      }
      // A misplaced shard would be another rank's values: far above q8's error.
      EXPECT_LT(nmse(g.y[0], count, p), 1e-3);
    }
  }
}

// The rail's gather alone (in front of NCCL, whose AllGather runs the node's part): each rank gets
// its rail's N shards, node n's at n, with the bits the node-aware gather puts at their owners'
// places (the same packets), and every byte it sends crosses nodes.
TEST(RailAllGather, TheRailsShardsInNodeOrderWithTheNodeAwareGathersBits) {
  const size_t count = 2345;
  const std::vector<uint64_t> hosts{5, 5, 6, 6};  // 2 nodes of 2, node by node
  const int p = 4, L = 2, N = 2;
  const Gathered whole = gather_node_aware(p, hosts, count, false);
  const double timeout_s = 20;
  auto t = testutil::loopback_transports(p, timeout_s);
  std::vector<std::vector<float>> x(p), y(p, std::vector<float>(N * count, -7.0f));
  std::vector<Status> st(p);
  std::vector<GatherStats> stats(p);
  GatherSettings gs;
  gs.seed = 3;
  gs.slice_elems = 1000;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    x[r].resize(count);
    for (size_t i = 0; i < count; ++i)
      x[r][i] = value(r, i);
  }
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto be = backend::make_host_backend();
      const Topology topo = make_topology(r, hosts);
      CommLink link = testutil::ring_link(t[r].get(), r, p, timeout_s, 9);  // whole's op_seq
      GatherArgs a;
      a.send = x[r].data();
      a.recv = y[r].data();
      a.count = count;
      a.codec = CodecId::kQ8;
      st[r] = rail_allgather(link, topo, *be, a, gs, &stats[r]);
    });
  }
  for (auto& th : threads)
    th.join();
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    ASSERT_TRUE(whole.st[r].ok()) << whole.st[r].to_string();
    for (int n = 0; n < N; ++n) {
      const int owner = n * L + r % L;
      EXPECT_EQ(std::memcmp(y[r].data() + n * count, whole.y[0].data() + owner * count, count * 4),
                0)
          << "rank " << r << ", node " << n;
    }
    EXPECT_EQ(stats[r].calls, 1u);
    EXPECT_EQ(stats[r].bytes_in, count * 4);
    EXPECT_GT(stats[r].bytes_sent, 0u);
    EXPECT_EQ(stats[r].inter_node_bytes_sent, stats[r].bytes_sent);
  }
  // A flat topology has no rail to gather along.
  auto be = backend::make_host_backend();
  GatherStats flat_stats;
  GatherArgs a;
  a.send = x[0].data();
  a.recv = y[0].data();
  a.count = count;
  const Status flat = rail_allgather(testutil::ring_link(t[0].get(), 0, p, timeout_s, 10),
                                     make_topology(0, {1, 2, 3, 4}), *be, a, gs, &flat_stats);
  EXPECT_FALSE(flat.ok());
}

TEST(CompressedAllGather, EveryLinearCodecSameBitsOneEncodingsErrorAndItsBytes) {
  const int p = 3;
  const size_t count = 4321;
  for (CodecId codec :
       {CodecId::kBf16, CodecId::kFp16, CodecId::kQ8, CodecId::kQ4, CodecId::kQ2, CodecId::kQ8r}) {
    SCOPED_TRACE(kernels::codec_name(codec));
    Gathered g = gather(p, codec, std::vector<size_t>(p, count));
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(g.st[r].ok()) << g.st[r].to_string();
      EXPECT_EQ(std::memcmp(g.y[r].data(), g.y[0].data(), g.y[0].size() * 4), 0) << "rank " << r;
      EXPECT_EQ(g.stats[r].calls, 1u);
      EXPECT_EQ(g.stats[r].bytes_in, count * 4);
      // (P - 1) copies of its packets out, (P - 1) shards' packets in: the same sizes.
      EXPECT_EQ(g.stats[r].bytes_sent, g.stats[r].bytes_received);
      EXPECT_EQ(g.stats[r].bytes_sent % (p - 1), 0u);
    }
    const double e = nmse(g.y[0], count, p);
    const double bound = codec == CodecId::kQ2 ? 0.3 : codec == CodecId::kQ4 ? 0.02 : 1e-3;
    EXPECT_GT(e, 0);
    EXPECT_LT(e, bound);
    const double ratio = static_cast<double>(g.stats[0].bytes_sent) / ((p - 1) * count * 4.0);
    // The codec's bits per element of 32, plus the packets' headers and scales (small slices).
    const uint32_t bits = kernels::codec_info(codec)->bits;
    EXPECT_LT(ratio, (bits == 0 ? 16 : bits) / 32.0 + 0.05);
  }
}

TEST(CompressedAllGather, TheErrorDoesNotGrowWithTheRanks) {
  const size_t count = 3000;
  const double e2 = nmse(gather(2, CodecId::kQ4, {count, count}).y[1], count, 2);
  Gathered g6 = gather(6, CodecId::kQ4, std::vector<size_t>(6, count));
  // Each shard is one encoding's error: rank 0's and 1's shards are their own on 6 ranks too.
  double err = 0, ref = 0;
  for (int q = 0; q < 2; ++q) {
    for (size_t i = 0; i < count; ++i) {
      const double d = g6.y[5][q * count + i] - value(q, i);
      err += d * d;
      ref += static_cast<double>(value(q, i)) * value(q, i);
    }
  }
  EXPECT_LT(err / ref, 1.5 * e2);
}

TEST(CompressedAllGather, InPlaceSmallAndEmptyShardsAndOneRank) {
  for (size_t count : {size_t(1), size_t(999), size_t(1001), size_t(0)}) {
    SCOPED_TRACE(count);
    Gathered a = gather(3, CodecId::kQ8, std::vector<size_t>(3, count), true);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(a.st[r].ok()) << a.st[r].to_string();
      EXPECT_EQ(std::memcmp(a.y[r].data(), a.y[0].data(), a.y[0].size() * 4), 0);
    }
    if (count > 0) {
      EXPECT_LT(nmse(a.y[0], count, 3), 1e-3);
    }
  }
  Gathered one = gather(1, CodecId::kBf16, {2500});
  ASSERT_TRUE(one.st[0].ok()) << one.st[0].to_string();
  EXPECT_EQ(one.stats[0].bytes_sent, 0u);
  EXPECT_LT(nmse(one.y[0], 2500, 1), 1e-4);  // the owner reads its decoded copy
}

TEST(CompressedAllGather, CodecsThatCannotGatherAreRefused) {
  for (CodecId codec : {CodecId::kNone, CodecId::kCasq4, CodecId::kS2, CodecId::kSparse}) {
    EXPECT_FALSE(gather_codec_usable(codec)) << kernels::codec_name(codec);
    Gathered g = gather(1, codec, {100});
    EXPECT_EQ(g.st[0].code(), Code::kInvalidArgument);
    EXPECT_NE(g.st[0].message().find(kernels::codec_name(codec)), std::string::npos);
    EXPECT_EQ(g.stats[0].failed, 1u);
  }
}

TEST(CompressedAllGather, RanksThatDisagreeOnTheCountFailInsteadOfHanging) {
  const double timeout = 20;
  Gathered g = gather(3, CodecId::kQ8, {5000, 5000, 5600}, false, timeout);
  EXPECT_LT(g.seconds, timeout / 2) << "the mismatch was not noticed before the timeout";
  bool named = false;
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(g.st[r].ok()) << "rank " << r;
    if (g.st[r].message().find("disagree") != std::string::npos) named = true;
    std::printf("rank %d: %s\n", r, g.st[r].to_string().c_str());
  }
  EXPECT_TRUE(named) << "no rank named the mismatch";
}

TEST(CompressedAllGather, AGoneRankFailsTheOthersWithinTheTimeout) {
  const double timeout = 2;
  Gathered g = gather(3, CodecId::kQ8, std::vector<size_t>(3, 5000), false, timeout, 2);
  EXPECT_LT(g.seconds, 3 * timeout);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(g.st[r].code(), Code::kRemoteError) << "rank " << r << ": " << g.st[r].to_string();
    EXPECT_NE(g.st[r].message().find("the compressed AllGather"), std::string::npos);
  }
}

}  // namespace
}  // namespace sketchccl::coll
