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
SCCL_HD_INLINE uint32_t codec_bits(CodecId c) {
  switch (c) {
    case CodecId::kQ8:
      return 8;
    case CodecId::kQ4:
    case CodecId::kCasq4:
      return 4;
    case CodecId::kQ2:
    case CodecId::kCasq2:
      return 2;
    case CodecId::kCasq3:
      return 3;
    default:
      return 0;
  }
}
SCCL_HD_INLINE bool is_quant(CodecId c) {
  return c == CodecId::kQ8 || c == CodecId::kQ4 || c == CodecId::kQ2;
}
SCCL_HD_INLINE bool is_casq(CodecId c) {
  return c == CodecId::kCasq2 || c == CodecId::kCasq3 || c == CodecId::kCasq4;
}

// Non-finite block mask: one bit per block of kBlock elements.
SCCL_HD_INLINE size_t nf_words(size_t n) {
  return bitmap_words(div_up(n, kBlock));
}

struct CasqLayout {
  uint32_t bits, clusters, buckets;
  size_t sizes_off, table_off, nf_off, codes_off, total;
};
SCCL_HD_INLINE uint32_t casq_total_buckets(size_t n, uint32_t clusters, float frac) {
  double b = double(frac) * double(n) + 0.5;
  uint64_t bb = b > 4294967295.0 ? 0xffffffffull : uint64_t(b);
  return bb < clusters ? clusters : uint32_t(bb);
}
SCCL_HD_INLINE CasqLayout casq_layout(uint32_t bits, size_t n, float frac) {
  CasqLayout L;
  L.bits = bits;
  L.clusters = 1u << bits;
  L.buckets = casq_total_buckets(n, L.clusters, frac);
  L.sizes_off = sizeof(PacketHeader);
  L.table_off = L.sizes_off + round8(size_t(L.clusters) * 4);
  L.nf_off = L.table_off + round8(size_t(L.buckets) * 4);
  L.codes_off = L.nf_off + nf_words(n) * 8;
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
// Deterministic sample: S positions, one per stratum of n/S, jittered by the hash.
SCCL_HD_INLINE size_t casq_sample_index(uint64_t key, size_t n, uint32_t S, uint32_t k) {
  // k * n / S without overflow: k < 2^32 and n % S < S <= 2^12.
  size_t lo = size_t(k) * (n / S) + size_t(k) * (n % S) / S;
  size_t hi = size_t(k + 1) * (n / S) + size_t(k + 1) * (n % S) / S;
  size_t w = hi > lo ? hi - lo : 1;
  return lo + size_t(mix64(key ^ (0xa5a5ull << 40) ^ k) % w);
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

SCCL_HD_INLINE uint32_t nearest(const float* c, uint32_t k, float v) {
  uint32_t best = 0;
  float bd = (v - c[0]) * (v - c[0]);
  for (uint32_t i = 1; i < k; ++i) {
    float d = (v - c[i]) * (v - c[i]);
    if (d < bd) {
      bd = d;
      best = i;
    }
  }
  return best;
}

// Decision thresholds of K sorted centers: the midpoints (K - 1 of them).
SCCL_HD_INLINE void casq_thresholds(const float* centers, uint32_t K, float* thr) {
  for (uint32_t c = 0; c + 1 < K; ++c)
    thr[c] = 0.5f * (centers[c] + centers[c + 1]);
}
// Code of v: the nearest center, by counting the thresholds below v.
SCCL_HD_INLINE uint32_t casq_code(const float* thr, uint32_t K, float v) {
  uint32_t code = 0;
  for (uint32_t c = 0; c + 1 < K; ++c)
    code += v > thr[c] ? 1u : 0u;
  return code;
}
SCCL_HD_INLINE uint32_t casq_bucket(uint64_t salt, size_t i, uint32_t size) {
  return fastrange(uint32_t(mix64(salt ^ uint64_t(i)) >> 32), size);
}

// Bucket sums in 64-bit fixed point: exact, so the same whatever order the values are added in
// (the CUDA build adds them with atomics). The scale comes from emax, the largest biased fp32
// exponent among the slice's finite values (casq_exponent; a max, so order-free too), and
// leaves casq_fix_headroom(n) = h bits for the sum of up to n values; a value under 2^(h - 37) of
// the largest (2^-18 at n = 2^18) loses low bits, an error under 2^(h - 61) of the largest, far
// below CASQ's quantization error (docs/codecs.md).
SCCL_HD_INLINE uint32_t casq_exponent(float v) {
  const uint32_t e = (f2u(v) >> 23) & 0xffu;
  return e == 0xffu ? 0u : e;
}
SCCL_HD_INLINE int casq_fix_headroom(size_t n) {
  int h = 1;
  while (h < 62 && (uint64_t(1) << h) <= uint64_t(n))
    ++h;
  return h;
}
// The fixed point's unit: 2^(188 - emax - head), so a value of exponent emax stays below
// 2^(62 - head). A double multiplied by it is exact; the conversion truncates toward zero.
SCCL_HD_INLINE double casq_fix_scale(uint32_t emax, int head) {
  return ldexp(1.0, 188 - (emax != 0 ? int(emax) : 1) - head);
}
SCCL_HD_INLINE int64_t casq_to_fix(float v, double scale) {
  const double d = double(v) * scale;
  // Non-finite values travel in the packet's non-finite mask, not in the sums; converting them
  // (or anything past int64) is undefined on the CPU and saturates on the GPU: 0 on both.
  return d > -9.2e18 && d < 9.2e18 ? int64_t(d) : 0;
}
SCCL_HD_INLINE float casq_fix_mean(int64_t sum, uint32_t cnt, uint32_t emax, int head) {
  return float(ldexp(double(sum) / double(cnt), (emax != 0 ? int(emax) : 1) - 188 + head));
}

// Offsets of the K bucket tables in the table array.
SCCL_HD_INLINE void casq_offsets(const uint32_t* sizes, uint32_t K, uint32_t* off) {
  for (uint32_t c = 0, o = 0; c < K; ++c) {
    off[c] = o;
    o += sizes[c];
  }
}
// Codes of one group of 8 values (elements i0 .. i0 + cnt - 1, in one block of kBlock), packed
// little-endian, 8 codes of BITS bits in BITS bytes (q_block.h's layout); add(b, v) adds each value
// to the sum of its bucket b. A non-finite block
// (`skip`) gets codes 0 and no bucket.
template <uint32_t BITS, typename Add>
SCCL_HD_INLINE uint64_t casq_group_codes(const float v[8], uint32_t cnt, size_t i0, bool skip,
                                         const float* thr, const uint32_t* off,
                                         const uint32_t* sizes, uint64_t salt, Add&& add) {
  uint64_t w = 0;
  if (skip) return w;
  for (uint32_t k = 0; k < 8 && k < cnt; ++k) {
    const uint32_t c = casq_code(thr, 1u << BITS, v[k]);
    add(off[c] + casq_bucket(salt, i0 + k, sizes[c]), v[k]);
    w |= uint64_t(c) << (k * BITS);
  }
  return w;
}
// Values of one group from its packed codes (NaN for a non-finite block).
template <uint32_t BITS>
SCCL_HD_INLINE void casq_group_values(uint64_t w, size_t i0, bool nan_block, const float* table,
                                      const uint32_t* off, const uint32_t* sizes, uint64_t salt,
                                      float v[8]) {
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t c = uint32_t(w >> (k * BITS)) & ((1u << BITS) - 1u);
    v[k] = nan_block ? qnan() : table[off[c] + casq_bucket(salt, i0 + k, sizes[c])];
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
