// `auto`'s cost model (coll/codec_choice.h): its byte estimates and its choices among `sparse`
// (element bitmap, row bitmap, index list), `s2` and the dense codec.
#include "src/coll/codec_choice.h"

#include <gtest/gtest.h>

#include <cmath>

#include "src/coll/support_encoding.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;

constexpr size_t kCount = size_t(1) << 20;

CostModelParams model(int nranks = 4) {
  CostModelParams p;
  p.count = kCount;
  p.nranks = nranks;
  return p;
}

// i.i.d. positions: rows not measured, the model fills them as i.i.d. would.
SupportHistory iid(double density) {
  SupportHistory h;
  h.known = true;
  h.nonzeros = static_cast<uint64_t>(density * kCount);
  return h;
}

// Rows of 64 contiguous non-zeros (embedding gradients).
SupportHistory rows(double density) {
  SupportHistory h = iid(density);
  h.rows = h.nonzeros / kRowElems;
  return h;
}

TEST(CodecChoice, FirstCallRunsSparseWithTheElementBitmap) {
  const CodecChoice c = choose_auto(model(), SupportHistory{});
  EXPECT_EQ(c.codec, CodecId::kSparse);
  EXPECT_EQ(c.support, SupportEncoding::kElementBitmap);
  EXPECT_EQ(choose_support(model(), SupportHistory{}), SupportEncoding::kElementBitmap);
}

TEST(CodecChoice, AboveTheSparseDensityTheDenseCodec) {
  CostModelParams p = model();
  p.dense_codec = CodecId::kQ4;
  EXPECT_EQ(choose_auto(p, iid(0.2)).codec, CodecId::kQ4);
  EXPECT_EQ(choose_auto(p, iid(1.0)).codec, CodecId::kQ4);
  EXPECT_EQ(choose_auto(p, iid(0.05)).codec, CodecId::kSparse);
  p.sparse_density = 0.01;
  EXPECT_EQ(choose_auto(p, iid(0.05)).codec, CodecId::kQ4);
}

TEST(CodecChoice, TheCheapestSupportEncoding) {
  for (int p : {4, 8}) {
    // Dense enough that the bitmap is cheap next to the values: the element bitmap.
    EXPECT_EQ(choose_auto(model(p), iid(0.05)).support, SupportEncoding::kElementBitmap) << p;
    EXPECT_EQ(choose_auto(model(p), rows(0.05)).support, SupportEncoding::kRowBitmap) << p;
    // Very sparse: i.i.d. positions fill many rows, so the index list; whole rows, the row bitmap.
    EXPECT_EQ(choose_auto(model(p), iid(0.001)).support, SupportEncoding::kIndexList) << p;
    EXPECT_EQ(choose_auto(model(p), rows(0.001)).support, SupportEncoding::kRowBitmap) << p;
    // An empty previous result: nothing to send but the smallest support message.
    EXPECT_NE(choose_auto(model(p), iid(0)).support, SupportEncoding::kElementBitmap) << p;
  }
}

TEST(CodecChoice, EstimatesFollowThePackets) {
  const CostModelParams p = model(4);
  const SupportHistory h = iid(0.01);
  const WireEstimate w = estimate_wire(p, h);
  const double ring = 2.0 * 3 / 4;
  // Bitmap count/8 plus 4 bytes per union value; headers (32 bytes per values slice) on top.
  const double element = ring * (kCount / 8.0 + 4.0 * h.nonzeros);
  EXPECT_GE(w.element_bitmap, element);
  EXPECT_LT(w.element_bitmap, element * 1.01);
  // q8: 264 bytes per 256 elements.
  EXPECT_NEAR(w.dense, ring * kCount * 264.0 / 256.0, ring * kCount * 0.01);
  // s2: the same bitmap plus fp64 counters at 1.3 per non-zero, never below sparse's bytes.
  EXPECT_GT(w.s2, w.element_bitmap);
  EXPECT_GT(w.s2, ring * (kCount / 8.0 + 8 * 1.3 * h.nonzeros) * 0.99);
  // The index list: twice the support's share plus 64 per slice, 4 bytes each, plus the values.
  EXPECT_GT(w.index_list, ring * (8.0 * h.nonzeros + 4.0 * h.nonzeros));
  EXPECT_LT(w.index_list, ring * (8.0 * h.nonzeros + 4.0 * h.nonzeros + 64 * 4 * 8 + 8 * 64));
  // Whole rows: count/512 bytes of rows plus the values of those rows.
  const WireEstimate wr = estimate_wire(p, rows(0.01));
  EXPECT_LT(wr.row_bitmap, ring * (kCount / 512.0 + 4.0 * h.nonzeros) * 1.01);
  // A buffer too large for u32 indices has no index list.
  CostModelParams big = p;
  big.count = (size_t(1) << 32) + 64;
  EXPECT_TRUE(std::isinf(estimate_wire(big, h).index_list));
}

TEST(CodecChoice, S2OnlyWhenItsBudgetCostsLessThanSparse) {
  // At 1.3 fp64 counters per non-zero s2 sends more than `sparse` at every density and support.
  for (int p : {4, 8}) {
    for (double d : {0.0001, 0.001, 0.01, 0.03, 0.1}) {
      EXPECT_EQ(choose_auto(model(p), iid(d)).codec, CodecId::kSparse) << p << " " << d;
      EXPECT_EQ(choose_auto(model(p), rows(d)).codec, CodecId::kSparse) << p << " " << d;
    }
  }
  // A budget under half a counter per non-zero (lossy, asked for) costs less than sparse's 4
  // bytes per value where the element bitmap is sparse's best encoding.
  CostModelParams cheap = model();
  cheap.s2_counters_per_nz = 0.3;
  EXPECT_EQ(choose_auto(cheap, iid(0.05)).codec, CodecId::kS2);
  EXPECT_EQ(choose_auto(cheap, rows(0.001)).codec, CodecId::kSparse);
}

TEST(CodecChoice, ASettingForcesTheEncoding) {
  CostModelParams p = model();
  p.support = SupportSetting::kRowBitmap;
  EXPECT_EQ(choose_support(p, iid(0.05)), SupportEncoding::kRowBitmap);
  EXPECT_EQ(choose_support(p, SupportHistory{}), SupportEncoding::kRowBitmap);
  p.support = SupportSetting::kIndexList;
  EXPECT_EQ(choose_support(p, iid(0.05)), SupportEncoding::kIndexList);
  // Its capacity comes from the previous support: none on a first call.
  EXPECT_EQ(choose_support(p, SupportHistory{}), SupportEncoding::kElementBitmap);
  p.support = SupportSetting::kElementBitmap;
  EXPECT_EQ(choose_support(p, iid(0.0001)), SupportEncoding::kElementBitmap);
  SupportSetting s;
  EXPECT_TRUE(support_setting_from_name("rows", &s));
  EXPECT_EQ(s, SupportSetting::kRowBitmap);
  EXPECT_FALSE(support_setting_from_name("list", &s));
}

TEST(CodecChoice, RowsOfIidPositions) {
  EXPECT_EQ(expected_rows(kCount, rows(0.01)), static_cast<double>(rows(0.01).rows));
  const double r = expected_rows(kCount, iid(0.001));
  EXPECT_NEAR(r, kCount / 64.0 * (1 - std::pow(0.999, 64)), 1.0);
  EXPECT_EQ(expected_rows(kCount, iid(0)), 0.0);
}

}  // namespace
}  // namespace sketchccl::coll
