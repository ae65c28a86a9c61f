// `sparse` phase 1's support encodings (coll/support_encoding.h): the arithmetic of each, and the
// engine end to end with ranks as threads over loopback sockets: `sparse` and `auto` exact with
// every encoding, the encoding the model picks for i.i.d. and row-sparse buffers, an index list
// that outgrows its capacity, and ReduceScatters with every encoding.
#include "src/coll/support_encoding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "kernels/sparse.h"
#include "src/coll/reduction_engine.h"
#include "tests/unit/coll/engine_ranks.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using testutil::EngineRanks;

std::vector<uint64_t> bitmap_of(const std::vector<float>& x) {
  std::vector<uint64_t> bits(kernels::bitmap_bytes(x.size()) / 8, 0);
  kernels::bitmap_build(x.data(), kernels::ElemType::kF32, x.size(), bits.data());
  return bits;
}

TEST(SupportEncoding, RowBitmapRoundTripKeepsTheTailClear) {
  for (size_t count : {size_t(1), size_t(64), size_t(65), size_t(4097), size_t(100003)}) {
    std::vector<float> x(count, 0.0f);
    std::mt19937_64 g(count);
    for (size_t i = 0; i < count; i += 1 + g() % 300)
      x[i] = 1.0f;
    x[count - 1] = 2.0f;
    const std::vector<uint64_t> bits = bitmap_of(x);
    std::vector<uint64_t> rows(row_bitmap_words(count)), back(bits.size(), 0);
    rows_of_bitmap(bits.data(), count, rows.data());
    bitmap_of_rows(rows.data(), count, back.data());
    for (size_t r = 0; r < bits.size(); ++r) {
      // Every set element's row is whole; empty rows stay empty.
      EXPECT_EQ(back[r] != 0, bits[r] != 0) << count << " row " << r;
      EXPECT_EQ(back[r] & bits[r], bits[r]) << count << " row " << r;
    }
    // Nothing at or above count (kernels/sparse.h's rule for the last word).
    for (size_t i = count; i < back.size() * 64; ++i)
      ASSERT_FALSE((back[i / 64] >> (i % 64)) & 1u) << count << " " << i;
    size_t in_rows = 0;
    for (size_t i = 0; i < count; ++i)
      in_rows += bits[i / 64] != 0;
    EXPECT_EQ(kernels::bitmap_popcount(back.data(), count), in_rows) << count;
  }
}

TEST(SupportEncoding, IndexListsAndTheirUnion) {
  std::vector<float> x(1000, 0.0f);
  for (size_t i : {3u, 64u, 65u, 500u, 999u})
    x[i] = 1.0f;
  const std::vector<uint64_t> bits = bitmap_of(x);
  std::vector<uint32_t> a;
  indices_in(bits.data(), 64, 500, &a);  // [64, 564)
  EXPECT_EQ(a, (std::vector<uint32_t>{64, 65, 500}));
  std::vector<uint32_t> b = {1, 65, 70, 998}, u;
  merge_indices(a, b, &u);
  EXPECT_EQ(u, (std::vector<uint32_t>{1, 64, 65, 70, 500, 998}));
  // Capacity: twice the share of the previous support, plus 64, at most the slice.
  EXPECT_EQ(index_list_capacity(1000, 100000, 10000), 264u);
  EXPECT_EQ(index_list_capacity(0, 100000, 10000), 64u);
  EXPECT_EQ(index_list_capacity(100000, 100000, 10000), 10000u);
  EXPECT_EQ(index_list_packet_bytes(1), 16u);
  EXPECT_EQ(index_list_packet_bytes(2), 16u);
  EXPECT_EQ(index_list_packet_bytes(3), 24u);
}

constexpr size_t kCount = size_t(1) << 20;

// Small integers: every order of fp32 sums is exact, so the result must equal the sum.
float value(std::mt19937_64& g) {
  return static_cast<float>(static_cast<int>(g() % 15) - 7) + 0.5f;
}

// i.i.d. positions at `density` on every rank.
std::vector<std::vector<float>> iid(int p, double density, uint64_t seed) {
  std::vector<std::vector<float>> x(p, std::vector<float>(kCount, 0.0f));
  for (int r = 0; r < p; ++r) {
    std::mt19937_64 g(seed * 31 + r);
    std::uniform_real_distribution<double> u(0, 1);
    for (float& v : x[r])
      if (u(g) < density) v = value(g);
  }
  return x;
}

// Embedding-style gradients: `rows_per_rank` rows of 64 contiguous non-zeros per rank, half of
// them shared by every rank.
std::vector<std::vector<float>> row_sparse(int p, size_t rows_per_rank, uint64_t seed) {
  std::vector<std::vector<float>> x(p, std::vector<float>(kCount, 0.0f));
  std::mt19937_64 shared(seed);
  std::vector<size_t> common;
  for (size_t k = 0; k < rows_per_rank / 2; ++k)
    common.push_back(shared() % (kCount / 64));
  for (int r = 0; r < p; ++r) {
    std::mt19937_64 g(seed * 31 + r + 1);
    std::vector<size_t> mine = common;
    while (mine.size() < rows_per_rank)
      mine.push_back(g() % (kCount / 64));
    for (size_t row : mine)
      for (size_t i = 0; i < 64; ++i)
        x[r][row * 64 + i] = value(g);
  }
  return x;
}

void expect_exact(const std::vector<std::vector<float>>& x,
                  const std::vector<std::vector<float>>& y, const char* what) {
  std::vector<float> sum(kCount, 0.0f);
  for (const auto& xr : x)
    for (size_t i = 0; i < kCount; ++i)
      sum[i] += xr[i];
  for (size_t r = 0; r < y.size(); ++r) {
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i)
      bad += y[r][i] != sum[i];
    EXPECT_EQ(bad, 0u) << what << ": rank " << r << " differs from the exact sum";
  }
}

Settings sparse_settings(bool auto_codec, SupportSetting support) {
  Settings s;
  s.auto_codec = auto_codec;
  s.codec = CodecId::kSparse;
  s.sparse_support = support;
  return s;
}

// Calls on one buffer; returns how many calls each encoding agreed the support with (rank 0;
// the same on every rank).
std::vector<uint64_t> run_calls(EngineRanks& ranks, int p, const std::vector<std::vector<float>>& x,
                                int calls, const char* what) {
  std::vector<std::vector<float>> y(p, std::vector<float>(kCount, -1.0f));
  for (int c = 0; c < calls; ++c) {
    ranks.run(static_cast<uint32_t>(c + 1), x, &y);
    expect_exact(x, y, what);
  }
  const CodecStats& s0 = ranks.stats(0, CodecId::kSparse);
  for (int r = 1; r < p; ++r) {
    const CodecStats& sr = ranks.stats(r, CodecId::kSparse);
    for (int e = 0; e < 3; ++e)
      EXPECT_EQ(sr.support_calls[e], s0.support_calls[e]) << what << " rank " << r;
  }
  return {s0.support_calls[0], s0.support_calls[1], s0.support_calls[2]};
}

TEST(SupportEncodingEngine, SparseIsExactWithEveryEncoding) {
  const int p = 4;
  const auto x = iid(p, 0.002, 1);
  {
    EngineRanks ranks(p, sparse_settings(false, SupportSetting::kElementBitmap), 60);
    EXPECT_EQ(run_calls(ranks, p, x, 2, "bitmap"), (std::vector<uint64_t>{2, 0, 0}));
  }
  {
    EngineRanks ranks(p, sparse_settings(false, SupportSetting::kRowBitmap), 60);
    EXPECT_EQ(run_calls(ranks, p, x, 2, "rows"), (std::vector<uint64_t>{0, 2, 0}));
  }
  {
    // The first call has no capacity for an index list: the element bitmap.
    EngineRanks ranks(p, sparse_settings(false, SupportSetting::kIndexList), 60);
    EXPECT_EQ(run_calls(ranks, p, x, 3, "indices"), (std::vector<uint64_t>{1, 0, 2}));
    EXPECT_EQ(ranks.stats(0, CodecId::kSparse).support_index_overflows, 0u);
  }
}

TEST(SupportEncodingEngine, AutoPicksTheIndexListForIidAndTheRowBitmapForRows) {
  for (int p : {4, 8}) {
    {
      EngineRanks ranks(p, sparse_settings(true, SupportSetting::kAuto), 60);
      const auto x = iid(p, 0.001 / p, 2);  // a union of about 0.1%
      EXPECT_EQ(run_calls(ranks, p, x, 3, "auto iid"), (std::vector<uint64_t>{1, 0, 2})) << p;
    }
    {
      EngineRanks ranks(p, sparse_settings(true, SupportSetting::kAuto), 60);
      const auto x = row_sparse(p, 16 / static_cast<size_t>(p) + 2, 3);  // about 0.1%
      EXPECT_EQ(run_calls(ranks, p, x, 3, "auto rows"), (std::vector<uint64_t>{1, 2, 0})) << p;
      // The row bitmap sent less than the element bitmap did.
      const CodecStats& s = ranks.stats(0, CodecId::kSparse);
      EXPECT_LT(s.support_bytes_sent, 3 * kCount / 8 * 2 * (p - 1) / p) << p;
    }
  }
}

TEST(SupportEncodingEngine, AnIndexListThatOutgrowsItsCapacityFallsBackToTheBitmap) {
  const int p = 4;
  EngineRanks ranks(p, sparse_settings(false, SupportSetting::kIndexList), 60);
  std::vector<std::vector<float>> y(p, std::vector<float>(kCount, -1.0f));
  const auto small = iid(p, 0.0005, 4), large = iid(p, 0.01, 5);
  // One buffer (a buffer is known by its address): the small input, then the large one.
  auto x = small;
  ranks.run(1, x, &y);
  expect_exact(x, y, "small");
  for (int r = 0; r < p; ++r)
    std::copy(large[r].begin(), large[r].end(), x[r].begin());
  ranks.run(2, x, &y);  // five times the capacity the first call's support set
  expect_exact(x, y, "large");
  ranks.run(3, x, &y);  // sized from the large support now
  expect_exact(x, y, "large again");
  for (int r = 0; r < p; ++r) {
    const CodecStats& s = ranks.stats(r, CodecId::kSparse);
    EXPECT_EQ(s.support_index_overflows, 1u) << r;
    EXPECT_EQ(s.support_calls[0], 2u) << r;  // the first call and the fallback
    EXPECT_EQ(s.support_calls[2], 1u) << r;
  }
}

// A fixed `sparse` picks its encoding from the history, so its ranks must agree on it: one rank
// that holds a history the others lack (an address reused for another tensor) makes the call run
// exact, and the next call agrees again.
TEST(SupportEncodingEngine, ARankWithAnotherHistoryRunsExactAndTheRanksAgreeAgain) {
  testutil::AllowWarnings allow("different histories");
  const int p = 3;
  EngineRanks ranks(p, sparse_settings(false, SupportSetting::kIndexList), 60);
  auto a = iid(p, 0.001, 8), b = iid(p, 0.001, 9);
  std::vector<std::vector<float>> y(p, std::vector<float>(kCount, -1.0f));
  ranks.run(1, a, &y);
  expect_exact(a, y, "first");
  a[0] = b[0];  // rank 0's second tensor, in the first one's memory
  const std::vector<const float*> send = {a[0].data(), b[1].data(), b[2].data()};
  for (uint32_t call = 2; call <= 3; ++call) {
    ranks.run(call, send, testutil::data_of(y), kCount);
    expect_exact(b, y, "after the reuse");
  }
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(ranks.engine(r).stats().decisions_disagreed, 1u) << r;
    EXPECT_EQ(ranks.stats(r, CodecId::kNone).calls, 1u) << r;               // the disagreeing call
    EXPECT_EQ(ranks.stats(r, CodecId::kSparse).support_calls[2], 1u) << r;  // agreed again
  }
  EXPECT_GE(allow.count(), 1);
}

TEST(SupportEncodingEngine, ReduceScatterIsExactWithEveryEncoding) {
  const int p = 4;
  const auto x = row_sparse(p, 6, 6);
  std::vector<float> sum(kCount, 0.0f);
  for (const auto& xr : x)
    for (size_t i = 0; i < kCount; ++i)
      sum[i] += xr[i];
  // Calls per encoding over three calls: the index list's first call has no capacity yet.
  const std::pair<SupportSetting, std::vector<uint64_t>> cases[] = {
      {SupportSetting::kElementBitmap, {3, 0, 0}},
      {SupportSetting::kRowBitmap, {0, 3, 0}},
      {SupportSetting::kIndexList, {1, 0, 2}},
      {SupportSetting::kAuto, {1, 2, 0}}};
  for (const auto& [setting, expect] : cases) {
    EngineRanks ranks(p, sparse_settings(setting == SupportSetting::kAuto, setting), 60);
    std::vector<std::vector<float>> y(p, std::vector<float>(kCount / p, -1.0f));
    for (uint32_t call = 1; call <= 3; ++call) {
      ranks.run(call, x, &y, true);
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < kCount / p; ++i)
          ASSERT_EQ(y[r][i], sum[r * (kCount / p) + i]) << r << " " << i;
    }
    for (int r = 0; r < p; ++r) {
      const CodecStats& s = ranks.stats(r, CodecId::kSparse);
      EXPECT_EQ((std::vector<uint64_t>{s.support_calls[0], s.support_calls[1], s.support_calls[2]}),
                expect)
          << static_cast<int>(setting) << " rank " << r;
    }
  }
}

TEST(SupportEncodingEngine, TheModelsEstimateIsWhatTheCallSends) {
  const int p = 4;
  for (SupportSetting s :
       {SupportSetting::kElementBitmap, SupportSetting::kRowBitmap, SupportSetting::kIndexList}) {
    Settings st = sparse_settings(false, s);
    EngineRanks ranks(p, st, 60);
    const auto x = row_sparse(p, 40, 7);
    std::vector<std::vector<float>> y(p, std::vector<float>(kCount, -1.0f));
    ranks.run(1, x, &y);
    ReductionEngine probe(st, p);
    // The history every rank holds after call 1, as the model sees it.
    const CodecStats& before = ranks.stats(0, CodecId::kSparse);
    const uint64_t sent1 = before.bytes_sent;
    ranks.run(2, x, &y);
    const uint64_t sent2 = ranks.stats(0, CodecId::kSparse).bytes_sent - sent1;
    std::set<size_t> union_rows;
    uint64_t nz = 0;
    for (size_t i = 0; i < kCount; ++i) {
      bool any = false;
      for (const auto& xr : x)
        any |= xr[i] != 0;
      nz += any;
      if (any) union_rows.insert(i / 64);
    }
    SupportHistory h;
    h.known = true;
    h.nonzeros = nz;
    h.rows = union_rows.size();
    const WireEstimate w = estimate_wire(probe.cost_model(kCount), h);
    const double est = s == SupportSetting::kElementBitmap ? w.element_bitmap
                       : s == SupportSetting::kRowBitmap   ? w.row_bitmap
                                                           : w.index_list;
    // Rank 0 sends 2(P-1) of the P chunks' packets; chunks differ by a few bytes.
    EXPECT_NEAR(static_cast<double>(sent2), est, est * 0.02) << static_cast<int>(s);
  }
}

}  // namespace
}  // namespace sketchccl::coll
