// `auto`'s cost model (docs/engine.md): the bytes each candidate would put on the wire, estimated
// from numbers every rank holds alike (the previous result's union support and non-empty
// 64-element rows), and the choice among `sparse` (with its cheapest support encoding), `s2` and
// SKETCHCCL_DENSE_CODEC. Pure functions: tests/unit/coll/codec_choice_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec.h"

namespace sketchccl::coll {

// How phase 1 of `sparse` agrees on the union support (coll/support_encoding.h).
enum class SupportEncoding : uint8_t { kElementBitmap = 0, kRowBitmap = 1, kIndexList = 2 };
const char* support_encoding_name(SupportEncoding e);

// SKETCHCCL_SPARSE_SUPPORT: the model's choice, or one encoding.
enum class SupportSetting : uint8_t { kAuto = 0, kElementBitmap, kRowBitmap, kIndexList };
// "auto", "bitmap", "rows", "indices"; false for other names.
bool support_setting_from_name(const char* name, SupportSetting* out);

// A row of the row bitmap: the elements of one word of the element bitmap.
constexpr size_t kRowElems = 64;

// The previous call's result on a buffer: identical on every rank (every rank decoded it).
struct SupportHistory {
  bool known = false;
  uint64_t nonzeros = 0;  // the union support
  uint64_t rows = 0;      // non-empty 64-element rows; 0 while nonzeros > 0: not measured
};

struct CostModelParams {
  size_t count = 0;
  int nranks = 2;
  size_t slice_elems = 262144;
  kernels::CodecId dense_codec = kernels::CodecId::kQ8;
  uint32_t s2_rows = 3;
  double s2_counters_per_nz = 1.3;
  // Exact candidates (sparse, s2) are preferred while the previous result is at most this dense
  // (SKETCHCCL_SPARSE_DENSITY); above it the dense codec runs.
  double sparse_density = 0.1;
  SupportSetting support = SupportSetting::kAuto;
};

// Bytes one rank sends in the call (2(P-1)/P of every packet's bytes, headers included), per
// candidate. Unusable candidates are +infinity.
struct WireEstimate {
  double element_bitmap = 0;  // `sparse` with each support encoding: phase 1 + phase 2
  double row_bitmap = 0;
  double index_list = 0;
  double s2 = 0;
  double dense = 0;
};
WireEstimate estimate_wire(const CostModelParams& p, const SupportHistory& h);

// Non-empty rows of the support: the measured count, else the count i.i.d. positions of that
// density would fill.
double expected_rows(size_t count, const SupportHistory& h);

// The encoding `sparse` runs with: the first call on a buffer uses the element bitmap (nothing
// is known yet); later calls the cheapest of the three, or the one SKETCHCCL_SPARSE_SUPPORT names
// (an index list needs the previous support for its capacity, so never on a first call).
SupportEncoding choose_support(const CostModelParams& p, const SupportHistory& h);

struct CodecChoice {
  kernels::CodecId codec = kernels::CodecId::kSparse;
  SupportEncoding support = SupportEncoding::kElementBitmap;  // when codec is `sparse`
};
// `auto`: `sparse` on a first call; the dense codec above sparse_density; else the cheaper of
// `sparse` (its cheapest encoding) and `s2`, `sparse` on a tie.
CodecChoice choose_auto(const CostModelParams& p, const SupportHistory& h);

}  // namespace sketchccl::coll
