// sketchcclCommGetStats on live standalone communicators (one process, two ranks by
// ncclCommInitAll): the figures after AllReduces, an older caller's smaller struct, bad handles.
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sketchccl/sketchccl.h>

extern "C" int stats_from_c(ncclComm_t comm, sketchcclCommStats* out);

namespace {

constexpr int kRanks = 2;
constexpr size_t kCount = 1 << 16;

class CommStatsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(ncclCommInitAll(comms_, kRanks, nullptr), ncclSuccess); }
  void TearDown() override {
    for (ncclComm_t c : comms_)
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
  // One AllReduce of kCount floats per rank, in a group as one thread drives both ranks.
  void allreduce() {
    std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(kCount, 1.0f));
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), kCount, ncclFloat32, ncclSum,
                              comms_[r], nullptr),
                ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(bufs[0][kCount - 1], 2.0f);
  }
  ncclComm_t comms_[kRanks] = {};
};

TEST_F(CommStatsTest, FiguresAfterAllReduces) {
  sketchcclCommStats s;
  ASSERT_EQ(stats_from_c(comms_[1], &s), 0);
  EXPECT_EQ(s.size, sizeof s);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.nranks, kRanks);
  EXPECT_EQ(s.calls_taken, 0u);
  EXPECT_EQ(s.num_codecs, 0);

  allreduce();
  allreduce();
  for (int r = 0; r < kRanks; ++r) {
    std::memset(&s, 0xff, sizeof s);
    s.size = sizeof s;
    ASSERT_EQ(sketchcclCommGetStats(comms_[r], &s), 0);
    EXPECT_EQ(s.rank, r);
    EXPECT_EQ(s.calls_taken, 2u);
    EXPECT_EQ(s.calls_forwarded, 0u);
    EXPECT_EQ(s.calls_failed, 0u);
    const uint64_t in = 2 * kCount * sizeof(float);
    EXPECT_EQ(s.bytes_in, in);
    // The exact ring (SKETCHCCL_CODEC=none, set by meson) sends 2(P-1)/P of the input, plus
    // packet headers.
    EXPECT_GE(s.bytes_sent, in);
    EXPECT_LT(s.bytes_sent, in + in / 10);
    EXPECT_EQ(s.bytes_received, s.bytes_sent);
    EXPECT_GT(s.seconds, 0.0);
    ASSERT_EQ(s.num_codecs, 1);
    EXPECT_STREQ(s.codecs[0].name, "none");
    EXPECT_EQ(s.codecs[0].calls, 2u);
    EXPECT_EQ(s.codecs[0].bytes_in, s.bytes_in);
    EXPECT_EQ(s.codecs[0].bytes_sent, s.bytes_sent);
    EXPECT_EQ(s.codecs[0].bytes_received, s.bytes_received);
    EXPECT_EQ(s.codecs[0].seconds, s.seconds);
  }
}

TEST_F(CommStatsTest, OlderCallersGetThePrefixTheyKnow) {
  allreduce();
  // A caller built when the struct ended after the totals: nothing past them is written.
  const size_t old_size = offsetof(sketchcclCommStats, num_codecs);
  std::vector<unsigned char> mem(sizeof(sketchcclCommStats), 0xab);
  sketchcclCommStats* s = reinterpret_cast<sketchcclCommStats*>(mem.data());
  s->size = old_size;
  ASSERT_EQ(sketchcclCommGetStats(comms_[0], s), 0);
  EXPECT_EQ(s->size, old_size);
  EXPECT_EQ(s->calls_taken, 1u);
  for (size_t i = old_size; i < mem.size(); ++i)
    ASSERT_EQ(mem[i], 0xab) << "byte " << i;
  // One whole codec entry fits: num_codecs says so.
  s->size = offsetof(sketchcclCommStats, codecs) + sizeof(sketchcclCodecStats);
  ASSERT_EQ(sketchcclCommGetStats(comms_[0], s), 0);
  EXPECT_EQ(s->num_codecs, 1);
  EXPECT_STREQ(s->codecs[0].name, "none");
}

TEST_F(CommStatsTest, BadArgumentsAreInvalidArgument) {
  sketchcclCommStats s;
  s.size = sizeof s;
  EXPECT_EQ(sketchcclCommGetStats(nullptr, &s), ncclInvalidArgument);
  EXPECT_EQ(sketchcclCommGetStats(comms_[0], nullptr), ncclInvalidArgument);
  int not_a_comm = 0;
  EXPECT_EQ(sketchcclCommGetStats(reinterpret_cast<ncclComm_t>(&not_a_comm), &s),
            ncclInvalidArgument);
  s.size = 0;
  EXPECT_EQ(sketchcclCommGetStats(comms_[0], &s), ncclInvalidArgument);
}

sketchcclCommStats stats_of(ncclComm_t comm) {
  sketchcclCommStats s;
  std::memset(&s, 0, sizeof s);
  s.size = sizeof s;
  EXPECT_EQ(sketchcclCommGetStats(comm, &s), 0);
  return s;
}

// Three groups of communicators in one process (FSDP makes several per process group), used one
// after another: the process's packet pool holds about what one group needs at once, not three
// times that, and the later groups' leases take the blocks the first group left.
TEST(PacketPool, CommunicatorsUsedOneAfterAnotherShareThePacketMemory) {
  constexpr int kGroups = 3;
  constexpr size_t kBig = size_t(1) << 21;  // 8 MiB per rank: blocks of 1 MiB and more, kept
  ncclComm_t comms[kGroups][kRanks] = {};
  for (auto& g : comms)
    ASSERT_EQ(ncclCommInitAll(g, kRanks, nullptr), ncclSuccess);
  std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(kBig));
  auto run = [&](ncclComm_t* g) {
    for (auto& b : bufs)
      std::fill(b.begin(), b.end(), 1.0f);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(
          ncclAllReduce(bufs[r].data(), bufs[r].data(), kBig, ncclFloat32, ncclSum, g[r], nullptr),
          ncclSuccess);
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(bufs[1][kBig - 1], 2.0f);
  };
  run(comms[0]);
  run(comms[0]);
  const sketchcclCommStats first = stats_of(comms[0][0]);
  for (int g = 1; g < kGroups; ++g) {
    run(comms[g]);
    run(comms[g]);
  }
  uint64_t peaks = 0;
  for (auto& g : comms) {
    for (ncclComm_t c : g) {
      const sketchcclCommStats s = stats_of(c);
      EXPECT_EQ(s.packet_leased_bytes, 0u);  // nothing held between its calls
      EXPECT_GT(s.packet_peak_bytes, 0u);
      peaks += s.packet_peak_bytes;
    }
  }
  const sketchcclCommStats last = stats_of(comms[2][1]);
  const uint64_t leases = last.process_packet_leases - first.process_packet_leases;
  const uint64_t reuses = last.process_packet_reuses - first.process_packet_reuses;
  std::printf(
      "six communicators' peaks %llu bytes; the process's pool holds %llu (peak %llu); "
      "groups 2 and 3: %llu leases, %llu reused a kept block\n",
      static_cast<unsigned long long>(peaks),
      static_cast<unsigned long long>(last.process_host_packet_bytes),
      static_cast<unsigned long long>(last.process_host_packet_peak_bytes),
      static_cast<unsigned long long>(leases), static_cast<unsigned long long>(reuses));
  EXPECT_GT(last.process_host_packet_bytes, 0u);
  // Without sharing each would keep its own blocks: the sum of the peaks. Shared, the pool holds
  // about a third of it (one group of three at a time).
  EXPECT_LT(last.process_host_packet_peak_bytes * 2, peaks);
  EXPECT_GT(leases, 0u);
  EXPECT_GE(reuses * 2, leases);
  EXPECT_EQ(last.process_pinned_packet_bytes, 0u);  // host memory only
  for (auto& g : comms) {
    for (ncclComm_t c : g)
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
  }
}

}  // namespace
