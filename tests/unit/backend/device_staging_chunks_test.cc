// The staged device call in chunks (docs/cuda.md, "Chunks"; SKETCHCCL_STAGE_CHUNK_BYTES): the
// proxy reads each input chunk only after its own flag, the stream copies each result chunk back
// once final, the result is the whole buffer's bit for bit, and a stalled chunk still releases
// the stream. Over the host model of the GPU (device_staging_support.h).
#include <gtest/gtest.h>

#include "tests/unit/backend/device_staging_support.h"

namespace sketchccl::backend {
namespace {

// The copies of the model's log into [p, p + bytes) (dst) or out of it (src), in the order
// they ran.
std::vector<ModelDevice::Event> copies(const ModelDevice& m, const void* p, size_t bytes,
                                       bool into) {
  std::vector<ModelDevice::Event> out;
  const auto lo = reinterpret_cast<uintptr_t>(p);
  for (const ModelDevice::Event& e : m.events()) {
    const auto at = reinterpret_cast<uintptr_t>(into ? e.dst : e.src);
    if (e.kind == ModelDevice::Event::kCopy && at >= lo && at < lo + bytes) out.push_back(e);
  }
  return out;
}

struct ChunkCase {
  const char* name;
  coll::Settings::Algo algo;
  coll::CallKind kind;
};

class Chunked : public DeviceStaging, public ::testing::WithParamInterface<ChunkCase> {};

// A lossy codec (q8), three ranks, 768 KiB in 16 chunks each way: the chunked device call's result
// is the host call's and the whole-buffer device call's, bit for bit, on the ring and on
// two-shot; the stream copied 16 chunks in and (an AllReduce) 16 back.
TEST_P(Chunked, ResultsAreBitIdenticalToTheHostCallAndTheWholeBuffer) {
  constexpr int kRanks = 3;
  constexpr size_t n = size_t(3) << 16;  // 768 KiB of fp32
  const ChunkCase p = GetParam();
  coll::Settings base = lossy_settings(20);
  base.algo = p.algo;
  const coll::Settings in_chunks = chunked(base, size_t(16) << 10);
  const coll::Settings whole = chunked(base, 0);
  const coll::Settings host_settings = chunked(base, size_t(16) << 10);
  Ranks dev(kRanks, in_chunks), dev_whole(kRanks, whole), host(kRanks, host_settings);
  const size_t out_n = p.kind == coll::CallKind::kAllReduce ? n : n / kRanks;
  std::vector<std::vector<float>> x(kRanks), yc(kRanks), yw(kRanks), yh(kRanks);
  std::vector<void*> streams;
  DrainAtExit drained(model());
  for (int r = 0; r < kRanks; ++r) {
    x[r].resize(n);
    for (size_t i = 0; i < n; ++i)
      x[r][i] = std::sin(0.0007f * static_cast<float>(i) * static_cast<float>(r + 2)) * 5.f;
    yc[r].assign(out_n, -1.f);
    yw[r].assign(out_n, -2.f);
    yh[r].assign(out_n, -3.f);
    streams.push_back(model().create_stream(r));
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(
        dev[r]
            .submit_reduction_stream(device_args(x[r].data(), yc[r].data(), n, p.kind), streams[r])
            .ok());
    ASSERT_TRUE(
        dev_whole[r]
            .submit_reduction_stream(device_args(x[r].data(), yw[r].data(), n, p.kind), streams[r])
            .ok());
  }
  std::vector<std::shared_ptr<coll::Work>> works;
  for (int r = 0; r < kRanks; ++r) {
    coll::ReductionArgs a = device_args(x[r].data(), yh[r].data(), n, p.kind);
    a.mem = MemoryType::kHost;
    works.push_back(host[r].submit_reduction(a));
  }
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(model().drain(r, streams[r], 60));
    ASSERT_TRUE(works[r]->wait().ok());
    EXPECT_EQ(std::memcmp(yc[r].data(), yh[r].data(), out_n * sizeof(float)), 0)
        << "rank " << r << ": the chunked device call's result differs from the host call's";
    EXPECT_EQ(std::memcmp(yc[r].data(), yw[r].data(), out_n * sizeof(float)), 0)
        << "rank " << r << ": the chunked device call's result differs from the whole buffer's";
    EXPECT_TRUE(dev[r].async_error().ok()) << dev[r].async_error().to_string();
    EXPECT_EQ(copies(model(), x[r].data(), n * sizeof(float), false).size(), 16u + 1u)
        << "rank " << r << ": the chunked call's input did not go in 16 chunks (+1 whole)";
    EXPECT_EQ(copies(model(), yc[r].data(), out_n * sizeof(float), true).size(), 16u)
        << "rank " << r << ": the result did not come back in 16 chunks";
    size_t inexact = 0;
    for (size_t i = 0; i < out_n; ++i) {
      const size_t at = p.kind == coll::CallKind::kAllReduce ? i : r * out_n + i;
      float exact = 0;
      for (int q = 0; q < kRanks; ++q)
        exact += x[q][at];
      inexact += yc[r][i] != exact ? 1 : 0;
    }
    EXPECT_GT(inexact, out_n / 10) << "the codec was not lossy: the comparison proves nothing";
  }
  const coll::CommStats st = dev[0].stats();
  const auto q8 = st.by_codec.find("q8");
  ASSERT_NE(q8, st.by_codec.end());
  EXPECT_EQ(q8->second.two_shot_calls, p.algo == coll::Settings::Algo::kTwoShot ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, Chunked,
    ::testing::Values(
        ChunkCase{"RingAllReduce", coll::Settings::Algo::kRing, coll::CallKind::kAllReduce},
        ChunkCase{"RingReduceScatter", coll::Settings::Algo::kRing, coll::CallKind::kReduceScatter},
        ChunkCase{"TwoShotAllReduce", coll::Settings::Algo::kTwoShot, coll::CallKind::kAllReduce},
        ChunkCase{"TwoShotReduceScatter", coll::Settings::Algo::kTwoShot,
                  coll::CallKind::kReduceScatter}),
    [](const ::testing::TestParamInfo<ChunkCase>& i) { return std::string(i.param.name); });

// Two ranks, exact, 4 MiB in 16 chunks of 256 KiB. Rank 1's last input chunk is slow to copy
// (500 ms, the stream's earlier work late for that part): its proxy must wait for that chunk's
// flag (had it read the chunk early, both ranks' sums would be wrong), and meanwhile rank 0's
// stream copies back the chunks of its result already final: its first copy back runs well
// before its last. Rank 1's stream copies its own ring chunk (the second half) in first.
TEST_F(DeviceStaging, ChunksPipelineTheInputAndTheResult) {
  constexpr int kRanks = 2;
  constexpr size_t n = size_t(1) << 20;
  constexpr size_t bytes = n * sizeof(float);
  Ranks ranks(kRanks, chunked(exact_settings(20), size_t(64) << 10));
  RankCalls calls(model(), kRanks, n);
  auto& [streams, x, y] = calls;
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < n; ++i)
      x[r][i] = input(r, 7, i);  // not a value an earlier test left in a kept block
  DrainAtExit drained(model());
  std::atomic<int> rank1_copies{0};
  const auto x1 = reinterpret_cast<uintptr_t>(x[1].data());
  model().on_copy([&](void*, const void* src, size_t) {
    const auto at = reinterpret_cast<uintptr_t>(src);
    if (at >= x1 && at < x1 + bytes && ++rank1_copies == 16)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(ranks[r]
                    .submit_reduction_stream(device_args(x[r].data(), y[r].data(), n), streams[r])
                    .ok());
  }
  for (int r = 0; r < kRanks; ++r)
    ASSERT_TRUE(model().drain(r, streams[r], 30));
  model().on_copy(nullptr);
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < n; ++i) {
      if (y[r][i] == sum_of(kRanks, 7, i)) continue;
      ADD_FAILURE() << "rank " << r << " element " << i << " is " << y[r][i]
                    << ": a chunk was read before the stream copied it";
      break;
    }
  }
  EXPECT_EQ(rank1_copies.load(), 16);
  const auto back = copies(model(), y[0].data(), bytes, true);
  ASSERT_EQ(back.size(), 16u) << "the result did not come back in chunks";
  const double spread = std::chrono::duration<double>(back.back().t - back.front().t).count();
  EXPECT_GT(spread, 0.2) << "every chunk came back at the end: no overlap";
  // The ring starts on chunk `rank`: rank 1 copies from its second half first.
  const auto in1 = copies(model(), x[1].data(), bytes, false);
  ASSERT_FALSE(in1.empty());
  EXPECT_GE(reinterpret_cast<uintptr_t>(in1.front().src),
            reinterpret_cast<uintptr_t>(x[1].data()) + bytes / 2);
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(ranks[r].async_error().ok()) << ranks[r].async_error().to_string();
}

// Abort, and separately the timeout, while the proxy waits for a chunk in the middle of the
// call (rank 0's last input chunk held back behind a latch): the proxy gives up at once (abort)
// or after SKETCHCCL_TIMEOUT, fails the call, and the stream goes through once it gets there.
class ChunkStall : public DeviceStaging, public ::testing::WithParamInterface<bool> {};

TEST_P(ChunkStall, ReleasesTheStream) {
  testutil::AllowWarnings allow("failed");
  const bool abort = GetParam();
  constexpr int kRanks = 2;
  constexpr size_t n = size_t(1) << 20;
  constexpr size_t bytes = n * sizeof(float);
  Ranks ranks(kRanks, chunked(exact_settings(abort ? 60 : 1), size_t(64) << 10));
  RankCalls calls(model(), kRanks, n);
  auto& [streams, x, y] = calls;
  DrainAtExit drained(model());
  auto latch = std::make_shared<Latch>();
  std::atomic<int> rank0_copies{0};
  const auto x0 = reinterpret_cast<uintptr_t>(x[0].data());
  model().on_copy([&, latch](void*, const void* src, size_t) {
    const auto at = reinterpret_cast<uintptr_t>(src);
    if (at >= x0 && at < x0 + bytes && ++rank0_copies == 16) latch->wait();
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(ranks[r]
                    .submit_reduction_stream(device_args(x[r].data(), y[r].data(), n), streams[r])
                    .ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(abort ? 300 : 2000));
  EXPECT_EQ(rank0_copies.load(), 16) << "the stream did not reach the held chunk";
  const auto t0 = Clock::now();
  if (abort) {
    ranks[0].abort();  // joins the proxy: it must not wait for the held chunk
    EXPECT_LT(seconds_since(t0), 5) << "the proxy waited for the chunk past the abort";
  } else {
    EXPECT_EQ(ranks[0].async_error().code(), Code::kRemoteError)
        << ranks[0].async_error().to_string();
    EXPECT_NE(ranks[0].async_error().message().find("did not reach the call"), std::string::npos)
        << ranks[0].async_error().to_string();
  }
  latch->release();
  EXPECT_TRUE(model().drain(0, streams[0], 10)) << "the stream was not released";
  ranks[1].abort();
  EXPECT_TRUE(model().drain(1, streams[1], 10)) << "rank 1's stream was not released";
  model().on_copy(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Ways, ChunkStall, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Abort" : "Timeout");
                         });

}  // namespace
}  // namespace sketchccl::backend
