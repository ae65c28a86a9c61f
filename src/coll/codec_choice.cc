#include "src/coll/codec_choice.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/sparse.h"
#include "src/coll/ring.h"
#include "src/coll/support_encoding.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::CodecParams;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Bytes of every packet of a ring over `count` elements cut like the AllReduce's ring.
template <typename PacketBytes>
double ring_packet_bytes(size_t count, int nranks, size_t slice_elems, PacketBytes bytes) {
  if (count == 0) return 0;
  const RingPlan plan(count, nranks, slice_elems, kRingChunkAlign);
  double total = 0;
  for (int c = 0; c < nranks; ++c) {
    for (int j = 0; j < plan.slices(c); ++j) {
      size_t offset = 0, n = 0;
      plan.slice(c, j, &offset, &n);
      if (n > 0) total += static_cast<double>(bytes(offset, n));
    }
  }
  return total;
}

// An AllReduce ring sends 2(P-1) of every P packets' bytes from each rank.
double per_rank(double packets, int nranks) {
  return nranks <= 1 ? 0 : packets * 2.0 * (nranks - 1) / nranks;
}

// The `none` ring of phase 2 over m values.
double values_bytes(double m, const CostModelParams& p) {
  if (m <= 0) return 0;
  CodecParams cp;
  cp.codec = CodecId::kNone;
  const auto mm = static_cast<size_t>(m);
  return ring_packet_bytes(mm, p.nranks, p.slice_elems,
                           [&](size_t, size_t n) { return kernels::packet_bytes(cp, n); });
}

}  // namespace

bool support_setting_from_name(const char* name, SupportSetting* out) {
  static const struct {
    const char* name;
    SupportSetting s;
  } kNames[] = {{"auto", SupportSetting::kAuto},
                {"bitmap", SupportSetting::kElementBitmap},
                {"rows", SupportSetting::kRowBitmap},
                {"indices", SupportSetting::kIndexList}};
  for (const auto& e : kNames) {
    if (std::strcmp(e.name, name) == 0) {
      *out = e.s;
      return true;
    }
  }
  return false;
}

double expected_rows(size_t count, const SupportHistory& h) {
  const double rows_total = std::ceil(static_cast<double>(count) / kRowElems);
  if (h.rows > 0 || h.nonzeros == 0 || count == 0) return static_cast<double>(h.rows);
  const double d = std::min(1.0, static_cast<double>(h.nonzeros) / static_cast<double>(count));
  // (1 - d)^64 by squaring: no pow(), whose glibc 2.29 version a -Dportable build cannot bind.
  static_assert(kRowElems == 64, "six squarings make the 64th power");
  double empty = 1.0 - d;
  for (int i = 0; i < 6; ++i)
    empty *= empty;
  return rows_total * (1.0 - empty);
}

WireEstimate estimate_wire(const CostModelParams& p, const SupportHistory& h) {
  WireEstimate w;
  const double u = static_cast<double>(h.nonzeros);
  const double bitmap = static_cast<double>(kernels::bitmap_bytes(p.count));
  w.element_bitmap = per_rank(bitmap + values_bytes(u, p), p.nranks);
  const double rows = expected_rows(p.count, h);
  const double row_values = std::min(static_cast<double>(p.count), rows * kRowElems);
  w.row_bitmap = per_rank(static_cast<double>(row_bitmap_words(p.count) * sizeof(uint64_t)) +
                              values_bytes(row_values, p),
                          p.nranks);
  if (h.known && p.count <= (size_t(1) << 32)) {
    const double lists = ring_packet_bytes(p.count, p.nranks, p.slice_elems, [&](size_t, size_t n) {
      return index_list_packet_bytes(index_list_capacity(h.nonzeros, p.count, n));
    });
    w.index_list = per_rank(lists + values_bytes(u, p), p.nranks);
  } else {
    w.index_list = kInf;
  }
  // s2 and the dense codec: their packets as the kernels size them (s2: the engine's budget,
  // the previous support spread evenly over the slices).
  CodecParams s2;
  s2.codec = CodecId::kS2;
  s2.s2_rows = p.s2_rows;
  w.s2 = per_rank(
      ring_packet_bytes(p.count, p.nranks, p.slice_elems,
                        [&](size_t, size_t n) {
                          const auto share = static_cast<uint64_t>(
                              std::ceil(u * static_cast<double>(n) / static_cast<double>(p.count)));
                          CodecParams q = s2;
                          q.s2_counters = kernels::s2_counters_for_support(share, p.s2_rows,
                                                                           p.s2_counters_per_nz);
                          return kernels::packet_bytes(q, n);
                        }),
      p.nranks);
  CodecParams dense;
  dense.codec = p.dense_codec;
  w.dense =
      per_rank(ring_packet_bytes(p.count, p.nranks, p.slice_elems,
                                 [&](size_t, size_t n) { return kernels::packet_bytes(dense, n); }),
               p.nranks);
  return w;
}

SupportEncoding choose_support(const CostModelParams& p, const SupportHistory& h) {
  switch (p.support) {
    case SupportSetting::kElementBitmap:
      return SupportEncoding::kElementBitmap;
    case SupportSetting::kRowBitmap:
      return SupportEncoding::kRowBitmap;
    case SupportSetting::kIndexList:
      return h.known ? SupportEncoding::kIndexList : SupportEncoding::kElementBitmap;
    case SupportSetting::kAuto:
      break;
  }
  if (!h.known) return SupportEncoding::kElementBitmap;
  const WireEstimate w = estimate_wire(p, h);
  // The element bitmap on a tie: it is what `sparse` always ran.
  SupportEncoding best = SupportEncoding::kElementBitmap;
  double cost = w.element_bitmap;
  if (w.row_bitmap < cost) {
    best = SupportEncoding::kRowBitmap;
    cost = w.row_bitmap;
  }
  if (w.index_list < cost) best = SupportEncoding::kIndexList;
  return best;
}

CodecChoice choose_auto(const CostModelParams& p, const SupportHistory& h) {
  CodecChoice c;
  // The first call runs `sparse`: exact, and it measures the support (a quantized result would
  // not: stochastic rounding turns zeros into small values).
  if (!h.known) return c;
  if (static_cast<double>(h.nonzeros) > p.sparse_density * static_cast<double>(p.count)) {
    c.codec = p.dense_codec;
    return c;
  }
  c.support = choose_support(p, h);
  const WireEstimate w = estimate_wire(p, h);
  double sparse = w.element_bitmap;
  if (c.support == SupportEncoding::kRowBitmap) sparse = w.row_bitmap;
  if (c.support == SupportEncoding::kIndexList) sparse = w.index_list;
  if (w.s2 < sparse) c.codec = CodecId::kS2;
  return c;
}

}  // namespace sketchccl::coll
