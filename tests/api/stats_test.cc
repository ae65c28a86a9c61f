// sketchcclCommGetStats on live standalone communicators (one process, two ranks by
// ncclCommInitAll): the figures after AllReduces, an older caller's smaller struct, bad handles.
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstddef>
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

}  // namespace
