// The codecs' arithmetic, written once as SCCL_HD functions over one unit of work (an element, a
// quantizer block, a CASQ fit) and driven by loops on the CPU (kernels/host/) and by CUDA
// kernels (kernels/cuda/). Packet layouts are documented in docs/codecs.md.
#pragma once

#include <math.h>

#include "kernels/codec_common.h"
#include "kernels/q_block.h"

namespace sketchccl::kernels::detail {

// ---- layouts
// -------------------------------------------------------------------------------------
// The table's facts (kernels/codecs.def) on either side of the device boundary: switches made
// from the table, since device code cannot read the host's kCodecs. An id outside the table has
// no packets (family kSparse) and no bits.
SCCL_HD_INLINE CodecFamily codec_family(CodecId c) {
  switch (c) {
#define SCCL_CODEC(id, name, family, ...) \
  case CodecId::id:                       \
    return CodecFamily::k##family;
#include "kernels/codecs.def"
#undef SCCL_CODEC
  }
  return CodecFamily::kSparse;
}
SCCL_HD_INLINE uint32_t codec_bits(CodecId c) {
  switch (c) {
#define SCCL_CODEC(id, name, family, bits, ...) \
  case CodecId::id:                             \
    return bits;
#include "kernels/codecs.def"
#undef SCCL_CODEC
  }
  return 0;
}
// Quantizers of a randomized Hadamard transform of each block (kernels/rotation.h).
SCCL_HD_INLINE bool codec_rotated(CodecId c) {
  switch (c) {
#define SCCL_CODEC(id, name, family, bits, wire, lossy, lossy_step, safer, dense, rotated) \
  case CodecId::id:                                                                        \
    return rotated != 0;
#include "kernels/codecs.def"
#undef SCCL_CODEC
  }
  return false;
}
// Blockwise quantizers: the linear family's codecs with bits per code (the others are casts).
SCCL_HD_INLINE bool is_quant(CodecId c) {
  return codec_family(c) == CodecFamily::kLinear && codec_bits(c) > 0;
}
SCCL_HD_INLINE bool is_casq(CodecId c) {
  return codec_family(c) == CodecFamily::kCasq;
}

// Non-finite block mask: one bit per block of kBlock elements.
SCCL_HD_INLINE size_t nf_words(size_t n) {
  return bitmap_words(div_up(n, kBlock));
}

struct CasqLayout {
  uint32_t bits, clusters, buckets;
  size_t sizes_off, table_off, nf_off, scales_off, codes_off, total;
};
// One table entry per cluster: the K levels (no hashed bucket tables: their means made rounding
// biased and cost a hash per element, docs/codecs.md). The header still names the bucket count
// (p0), equal to the levels.
SCCL_HD_INLINE CasqLayout casq_layout(uint32_t bits, size_t n) {
  CasqLayout L;
  L.bits = bits;
  L.clusters = 1u << bits;
  L.buckets = L.clusters;
  L.sizes_off = sizeof(PacketHeader);
  L.table_off = L.sizes_off + round8(size_t(L.clusters) * 4);
  L.nf_off = L.table_off + round8(size_t(L.buckets) * 4);
  L.scales_off = L.nf_off + nf_words(n) * 8;
  L.codes_off = L.scales_off + round8(div_up(n, kCasqSub) * 2);
  L.total = L.codes_off + round8(div_up(n, 8) * bits);
  return L;
}

struct S2Layout {
  uint32_t rows, counters;
  size_t bitmap_off, nf_off, sketch_off, total;
};
SCCL_HD_INLINE S2Layout s2_layout(uint32_t rows, uint32_t counters, size_t n) {
  S2Layout L;
  L.rows = rows;
  L.counters = counters;
  L.bitmap_off = sizeof(PacketHeader);
  L.nf_off = L.bitmap_off + bitmap_words(n) * 8;
  L.sketch_off = L.nf_off + nf_words(n) * 8;
  L.total = L.sketch_off + size_t(rows) * counters * 8;  // fp64 counters, see docs/codecs.md
  return L;
}

// ---- packet validation
// -------------------------------------------------------------------------
// Why a received packet is refused, checked before any payload access (both builds; the CPU
// build turns the reason into a message, the CUDA kernels into the call's device verdict).
enum PacketVerdict : int {
  kPacketOk = 0,
  kPacketMagic = 1,
  kPacketVersion = 2,
  kPacketCodec = 3,
  kPacketCount = 4,
  kPacketParams = 5,
  kPacketSalt = 6,
  kPacketTables = 7,
};
SCCL_HD_INLINE int header_verdict(const PacketHeader& h, const PacketHeader& e) {
  if (h.magic != kMagic) return kPacketMagic;
  if (h.version != kVersion) return kPacketVersion;
  if (h.codec != e.codec) return kPacketCodec;
  if (h.n != e.n) return kPacketCount;
  if (h.bits != e.bits || h.rows != e.rows || h.p0 != e.p0 || h.p1 != e.p1) return kPacketParams;
  // s2 hashes positions with the salt, the others carry 0; CASQ's is the producing step's, so
  // any is valid (and the step rewrites it).
  if (!is_casq(CodecId(e.codec)) && h.salt != e.salt) return kPacketSalt;
  return kPacketOk;
}
// CASQ: e.p1 table sizes at `sizes`, each >= 1, adding up to e.p0 buckets.
SCCL_HD_INLINE int casq_tables_verdict(const uint8_t* sizes, const PacketHeader& e) {
  uint64_t sum = 0;
  for (uint32_t c = 0; c < e.p1; ++c) {
    uint32_t size;
    memcpy(&size, sizes + 4 * c, 4);
    if (size == 0) return kPacketTables;
    sum += size;
  }
  return sum == e.p0 ? kPacketOk : kPacketTables;
}
// Both, for a packet of the full expected length.
SCCL_HD_INLINE int packet_verdict(const uint8_t* pkt, const PacketHeader& e) {
  PacketHeader h;
  memcpy(&h, pkt, sizeof(h));
  const int v = header_verdict(h, e);
  if (v != kPacketOk || !is_casq(CodecId(e.codec))) return v;
  return casq_tables_verdict(pkt + sizeof(PacketHeader), e);
}

// ---- CASQ
// ----------------------------------------------------------------------------------------
constexpr uint32_t kCasqMaxK = 16;
constexpr uint32_t kCasqShift = 30;  // fraction bits of the rounding between two levels

// The fit's sample: whole 256-blocks, min(blocks, kCasqSample / kBlock) of them, one per
// stratum of the slice's blocks, jittered by the hash. Whole blocks, so that a block's scale is
// known as soon as the block is read: the CPU fits before its one pass over the slice.
SCCL_HD_INLINE uint32_t casq_sample_blocks(size_t n) {
  const size_t nb = div_up(n, kBlock);
  return uint32_t(nb < kCasqSample / kBlock ? nb : kCasqSample / kBlock);
}
// The k-th sampled block (of S), in increasing order.
SCCL_HD_INLINE size_t casq_sample_block(uint64_t key, size_t n, uint32_t S, uint32_t k) {
  const size_t nb = div_up(n, kBlock);
  // k * nb / S without overflow: k < 2^32 and nb % S < S <= 16.
  size_t lo = size_t(k) * (nb / S) + size_t(k) * (nb % S) / S;
  size_t hi = size_t(k + 1) * (nb / S) + size_t(k + 1) * (nb % S) / S;
  size_t w = hi > lo ? hi - lo : 1;
  return lo + size_t(mix64(key ^ (0xa5a5ull << 40) ^ k) % w);
}
// Items of the sample: sampled block k's elements at k * kBlock; only the last can be partial.
SCCL_HD_INLINE uint32_t casq_sample_count(uint64_t key, size_t n) {
  const uint32_t S = casq_sample_blocks(n);
  if (S == 0) return 0;
  const size_t last = casq_sample_block(key, n, S, S - 1) * kBlock;
  return uint32_t((S - 1) * kBlock + (n - last < kBlock ? n - last : kBlock));
}

SCCL_HD_INLINE void sort_small(float* c, uint32_t k) {
  for (uint32_t i = 1; i < k; ++i) {
    float v = c[i];
    uint32_t j = i;
    while (j > 0 && c[j - 1] > v) {
      c[j] = c[j - 1];
      --j;
    }
    c[j] = v;
  }
}

// A scale from the largest |v| of its kCasqSub values as fp32 bits (sign cleared: unsigned order
// is magnitude order, so an integer maximum, exact in any order and vectorisable); a bit pattern
// at or above Inf's means a non-finite value (scale 0: the block travels in the non-finite mask).
SCCL_HD_INLINE uint32_t casq_abs_bits(float v) {
  return f2u(v) & 0x7fffffffu;
}
SCCL_HD_INLINE bool casq_bits_finite(uint32_t absmax_bits) {
  return absmax_bits < 0x7f800000u;
}
// The stored scale: the largest |v| rounded up to bf16 (the upper 16 bits of its fp32 pattern),
// so every |v| <= s; capped at bf16's largest finite value (a |v| above 3.3895e38 rounds to the
// top level, off by under 0.4%). 0 for a non-finite or all-zero set.
SCCL_HD_INLINE uint16_t casq_scale16(uint32_t absmax_bits) {
  if (!casq_bits_finite(absmax_bits)) return 0;
  const uint32_t up = (absmax_bits + 0xffffu) >> 16;
  return uint16_t(up < 0x7f7fu ? up : 0x7f7fu);
}
SCCL_HD_INLINE float casq_scale_value(uint16_t s16) {
  return u2f(uint32_t(s16) << 16);
}
SCCL_HD_INLINE float casq_scale(uint32_t absmax_bits) {
  return casq_scale_value(casq_scale16(absmax_bits));
}
// v normalised by its scale, in [-1, 1] (correctly rounded division: |v| <= s gives |v / s| <= 1
// exactly; the clamp only for the capped scale); 0 when s is 0. The fit's sample.
SCCL_HD_INLINE float casq_unit(float v, float s) {
  const float u = s > 0.0f ? v / s : 0.0f;
  return u < -1.0f ? -1.0f : (u > 1.0f ? 1.0f : u);
}
// The rounding's key for block blk of kBlock elements (rand32 per element).
SCCL_HD_INLINE uint32_t casq_block_key(uint64_t key, size_t blk) {
  return uint32_t(mix64(key ^ 0xca5ca5ull ^ (uint64_t(blk) * 0xd1b54a32d192ed03ull)));
}

// A block's rounding thresholds: its values are compared with the decoded values lvl[c] * s
// themselves (no division per element), in a domain scaled by a power of two f: 1 for s in
// [2^-64, 2^64), else the power that brings s near 1, so that every gap between levels is a
// normal float there. ls[c] = lvl[c] * s * f; iv[c] = 2^30 / (ls[c + 1] - ls[c]), 0 for the
// last level and for gaps below 2^-97 (two levels that close round down: an error below 2^-33
// of the block's scale).
struct CasqThresholds {
  float f;
  float ls[kCasqMaxK];
  float iv[kCasqMaxK];
};
SCCL_HD_INLINE float casq_prescale(float s) {
  const int32_t e = int32_t((f2u(s) >> 23) & 0xffu);  // s >= 0
  if (e >= 127 - 64 && e < 127 + 64) return 1.0f;
  int32_t k = 127 - e;  // s * 2^k in [1, 2) for a normal s
  k = k < -126 ? -126 : (k > 126 ? 126 : k);
  return u2f(uint32_t(k + 127) << 23);
}
template <uint32_t K>
SCCL_HD_INLINE void casq_thresholds(const float* lvl, float s, CasqThresholds* t) {
  t->f = casq_prescale(s);
  const float sf = s * t->f;  // exact
  for (uint32_t c = 0; c < K; ++c)
    t->ls[c] = lvl[c] * sf;
  for (uint32_t c = 0; c < K; ++c) {
    const float gap = c + 1 < K ? t->ls[c + 1] - t->ls[c] : 0.0f;
    t->iv[c] = gap >= u2f(0x0f000000u) ? float(1u << kCasqShift) / gap : 0.0f;  // 2^-97
  }
}
// Code of w = v * f (thresholds t, levels sorted, w in [ls[0], ls[K - 1]]): j with ls[j] <= w <
// ls[j + 1], plus one with probability (w - ls[j]) / (ls[j + 1] - ls[j]) (sr_up of the fixed-point
// fraction and the draw r): stochastic rounding between the two decoded values around v, so
// E[lvl[code] * s] = v. A value equal to a level gets that level. Selects, no table lookups:
// vectorisable (K >= 8: j counted, then two lookups: cheaper than two selects per level).
template <uint32_t K>
SCCL_HD_INLINE uint32_t casq_code(float w, const CasqThresholds& t, uint32_t r) {
  uint32_t j = 0;
  float lo = t.ls[0], iv = t.iv[0];
  if constexpr (K >= 8) {
    for (uint32_t c = 1; c < K; ++c)
      j += w >= t.ls[c] ? 1u : 0u;
    lo = t.ls[j];
    iv = t.iv[j];
  } else {
    for (uint32_t c = 1; c < K; ++c) {
      const bool ge = w >= t.ls[c];
      j += ge ? 1u : 0u;
      lo = ge ? t.ls[c] : lo;
      iv = ge ? t.iv[c] : iv;
    }
  }
  // p in [0, 2^30] up to rounding (+0 or -0 at a level), clamped as a signed min of its bits.
  int32_t p = int32_t(f2u((w - lo) * iv));
  p = p < int32_t(0x4e800000) ? p : int32_t(0x4e800000);  // 2^30
  return j + sr_up<kCasqShift>(uint32_t(int32_t(u2f(uint32_t(p)))), r);
}
// The draw of element j of a block keyed bkey; `nearest` (CodecParams::casq_nearest): one half,
// the nearest level instead of stochastic rounding.
SCCL_HD_INLINE uint32_t casq_draw(uint32_t bkey, uint32_t j, bool nearest) {
  return nearest ? 0x80000000u : rand32(bkey, j);
}
// 8 codes of BITS bits packed little-endian in BITS bytes (q_block.h's layout).
template <uint32_t BITS, typename C>
SCCL_HD_INLINE uint64_t casq_pack(const C* c) {
  uint64_t w = 0;
  for (uint32_t k = 0; k < 8; ++k)
    w |= uint64_t(c[k]) << (k * BITS);
  return w;
}
// Codes of one group of 8 values (elements i0 .. i0 + cnt - 1, in one block of kBlock whose key
// is bkey and thresholds t), packed. A non-finite block (`skip`) gets codes 0, as do the padding
// elements past cnt.
template <uint32_t BITS>
SCCL_HD_INLINE uint64_t casq_group_codes(const float v[8], uint32_t cnt, size_t i0, bool skip,
                                         const CasqThresholds& t, uint32_t bkey, bool nearest) {
  uint32_t c[8];
  const uint32_t j0 = uint32_t(i0 % kBlock);
  for (uint32_t k = 0; k < 8; ++k)
    c[k] = !skip && k < cnt ? casq_code<1u << BITS>(v[k] * t.f, t, casq_draw(bkey, j0 + k, nearest))
                            : 0u;
  return casq_pack<BITS>(c);
}
// Values of one group from its packed codes and its block's scale (NaN for a non-finite block).
template <uint32_t BITS>
SCCL_HD_INLINE void casq_group_values(uint64_t w, bool nan_block, float s, const float* lvl,
                                      float v[8]) {
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t c = uint32_t(w >> (k * BITS)) & ((1u << BITS) - 1u);
    v[k] = nan_block ? qnan() : lvl[c] * s;
  }
}

// ---- s2
// ------------------------------------------------------------------------------------------
// Counter of element i in row j, and its sign (+1 / -1) in *neg (true = -1).
SCCL_HD_INLINE uint32_t s2_bucket(uint64_t salt, uint32_t row, size_t i, uint32_t counters,
                                  bool* neg) {
  uint64_t h =
      mix64(salt + uint64_t(row) * 0x9e3779b97f4a7c15ull + uint64_t(i) * 0xbf58476d1ce4e5b9ull);
  *neg = (h & 1u) != 0;
  return fastrange(uint32_t(h >> 32), counters);
}

}  // namespace sketchccl::kernels::detail
