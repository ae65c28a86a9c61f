// The codecs' arithmetic, written once as SCCL_HD functions over one unit of work (an element, a
// quantizer block, a CASQ fit) and driven by loops on the CPU (kernels/host/) and by CUDA
// kernels (kernels/cuda/). Packet layouts are documented in docs/codecs.md.
#pragma once

#include <math.h>

#include "kernels/codec_common.h"

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

// q*: one record per block of 256: float min, float scale, 256 codes of b bits.
SCCL_HD_INLINE size_t q_record_bytes(uint32_t bits) {
  return 8 + kBlock * bits / 8;
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

// ---- q*: blockwise uniform quantization with stochastic rounding -----------------------------
SCCL_HD_INLINE uint32_t q_block_key(uint64_t key, size_t blk) {
  return uint32_t(mix64(key ^ (uint64_t(blk) * 0xd1b54a32d192ed03ull)));
}

// Values of one record (cnt <= 256 of them) into v.
template <uint32_t BITS>
SCCL_HD_INLINE void q_unpack_record(const uint8_t* rec, size_t cnt, float* v) {
  float mn, sc;
  memcpy(&mn, rec, 4);
  memcpy(&sc, rec + 4, 4);
  const uint8_t* codes = rec + 8;
  if constexpr (8 % BITS == 0) {
    constexpr uint32_t per = 8 / BITS, mask = (1u << BITS) - 1u;
    const size_t full = cnt / per;  // whole bytes, then the tail
    for (size_t b = 0; b < full; ++b) {
      for (uint32_t k = 0; k < per; ++k) {
        int32_t c = int32_t((uint32_t(codes[b]) >> (k * BITS)) & mask);
        v[b * per + k] = mn + float(c) * sc;
      }
    }
    for (size_t j = full * per; j < cnt; ++j) {
      int32_t c = int32_t((uint32_t(codes[j / per]) >> ((j % per) * BITS)) & mask);
      v[j] = mn + float(c) * sc;
    }
  } else {
    for (size_t g = 0; g * 8 < cnt; ++g) {
      uint32_t c[8];
      unpack8(codes + g * BITS, BITS, c);
      for (size_t k = 0; k < 8 && g * 8 + k < cnt; ++k)
        v[g * 8 + k] = mn + float(c[k]) * sc;
    }
  }
}

// Encodes v[cnt] (cnt <= 256) as one record. Non-finite input makes min and scale NaN, so the
// whole block decodes as NaN. Stochastic rounding: code = floor(u) + (uniform < frac(u)).
template <uint32_t BITS>
SCCL_HD_INLINE void q_pack_record(const float* v, size_t cnt, uint32_t k32, uint8_t* rec) {
  constexpr uint32_t L = (1u << BITS) - 1u;
  // Min and max in 8 independent lanes (vectorizes; the result does not depend on the order).
  float mn = cnt > 0 ? v[0] : 0.0f, mx = mn;
  float lo[8], hi[8];
  for (int k = 0; k < 8; ++k)
    lo[k] = hi[k] = mn;
  size_t j8 = cnt & ~size_t(7);
  for (size_t j = 0; j < j8; j += 8) {
    for (int k = 0; k < 8; ++k) {
      lo[k] = v[j + k] < lo[k] ? v[j + k] : lo[k];
      hi[k] = v[j + k] > hi[k] ? v[j + k] : hi[k];
    }
  }
  for (size_t j = j8; j < cnt; ++j) {
    lo[0] = v[j] < lo[0] ? v[j] : lo[0];
    hi[0] = v[j] > hi[0] ? v[j] : hi[0];
  }
  for (int k = 0; k < 8; ++k) {
    mn = lo[k] < mn ? lo[k] : mn;
    mx = hi[k] > mx ? hi[k] : mx;
  }
  uint32_t nonfinite = 0;
  for (size_t j = 0; j < cnt; ++j) {
    nonfinite |= uint32_t((f2u(v[j]) & 0x7f800000u) == 0x7f800000u);
  }
  const bool finite = nonfinite == 0;
  float sc = mx / float(L) - mn / float(L);  // no overflow for finite mn, mx
  if (!finite) {
    mn = qnan();
    sc = qnan();
  }
  memcpy(rec, &mn, 4);
  memcpy(rec + 4, &sc, 4);
  const float inv = (finite && sc > 0.0f) ? 1.0f / sc : 0.0f;
  uint8_t code[kBlock];
  for (size_t j = cnt; j < kBlock; ++j)
    code[j] = 0;
  // int32 conversions only (values < 2^24): they vectorize, unsigned ones do not.
  for (size_t j = 0; j < cnt; ++j) {
    float u = (v[j] - mn) * inv;
    u = u > 0.0f ? u : 0.0f;  // also maps NaN to 0
    u = u < float(L) ? u : float(L);
    int32_t fl = int32_t(u);
    int32_t c = fl + int32_t(uniform24(k32, uint32_t(j)) < u - float(fl));
    code[j] = uint8_t(c > int32_t(L) ? int32_t(L) : c);
  }
  uint8_t* codes = rec + 8;
  if constexpr (8 % BITS == 0) {
    constexpr uint32_t per = 8 / BITS;
    for (size_t b = 0; b < kBlock / per; ++b) {
      uint32_t byte = 0;
      for (uint32_t k = 0; k < per; ++k)
        byte |= uint32_t(code[b * per + k]) << (k * BITS);
      codes[b] = uint8_t(byte);
    }
  } else {
    for (size_t g = 0; g < kBlock / 8; ++g) {
      uint32_t c[8];
      for (uint32_t k = 0; k < 8; ++k)
        c[k] = code[g * 8 + k];
      pack8(c, BITS, codes + g * BITS);
    }
  }
}

// One block of q* encode or fused step: (the incoming block decoded, when `in_rec` is given) + x,
// re-encoded with stochastic rounding. x holds elements [base, base + cnt) of type ET.
template <uint32_t BITS, int ET>
SCCL_HD_INLINE void q_step_block(const uint8_t* in_rec, const void* x, size_t base, size_t cnt,
                                 uint32_t k32, uint8_t* out_rec) {
  float v[kBlock];
  if (in_rec != nullptr) {
    q_unpack_record<BITS>(in_rec, cnt, v);
    for (size_t j = 0; j < cnt; ++j)
      v[j] += load_elem<ET>(x, base + j);
  } else {
    for (size_t j = 0; j < cnt; ++j)
      v[j] = load_elem<ET>(x, base + j);
  }
  q_pack_record<BITS>(v, cnt, k32, out_rec);
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

// 1-D k-means on vals[m]: k-means++ seeding from the hash stream `key`, then Lloyd iterations.
// d2[m] is scratch. Writes k sorted centers.
SCCL_HD_INLINE void kmeans1d(const float* vals, uint32_t m, uint32_t k, uint64_t key, float* d2,
                             float* centers) {
  if (m == 0) {
    for (uint32_t i = 0; i < k; ++i)
      centers[i] = 0.0f;
    return;
  }
  centers[0] = vals[mix64(key) % m];
  double total = 0.0;
  for (uint32_t i = 0; i < m; ++i) {
    float d = vals[i] - centers[0];
    d2[i] = d * d;
    total += d2[i];
  }
  for (uint32_t c = 1; c < k; ++c) {
    if (!(total > 0.0)) {
      centers[c] = centers[c - 1];
      continue;
    }
    double u = double(mix64(key + 0x9e37ull * (c + 1)) >> 11) * (1.0 / 9007199254740992.0);
    double target = u * total, acc = 0.0;
    uint32_t pick = m - 1;
    for (uint32_t i = 0; i < m; ++i) {
      acc += d2[i];
      if (acc > target) {
        pick = i;
        break;
      }
    }
    centers[c] = vals[pick];
    total = 0.0;
    for (uint32_t i = 0; i < m; ++i) {
      float d = vals[i] - centers[c];
      float dd = d * d;
      d2[i] = dd < d2[i] ? dd : d2[i];
      total += d2[i];
    }
  }
  sort_small(centers, k);
  for (int it = 0; it < kCasqLloydIters; ++it) {
    double sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t cnt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t i = 0; i < m; ++i) {
      uint32_t b = nearest(centers, k, vals[i]);
      sum[b] += vals[i];
      cnt[b]++;
    }
    for (uint32_t c = 0; c < k; ++c) {
      if (cnt[c]) centers[c] = float(sum[c] / cnt[c]);
    }
    sort_small(centers, k);
  }
}

// Fits K = 2^bits clusters (K/2 per sign) to sample[m] and sizes their bucket tables within
// `buckets` (>= K) total. work holds 2*m floats. Writes K sorted centers and K sizes (>= 1).
SCCL_HD_INLINE void casq_fit(const float* sample, uint32_t m, uint32_t bits, uint32_t buckets,
                             uint64_t key, float* work, float* centers, uint32_t* sizes) {
  const uint32_t K = 1u << bits, half = K / 2;
  float* neg = work;
  uint32_t nn = 0, np = 0;
  for (uint32_t i = 0; i < m; ++i)
    nn += sample[i] < 0.0f ? 1u : 0u;
  float* pos = work + nn;
  for (uint32_t i = 0; i < m; ++i) {
    if (sample[i] < 0.0f) {
      neg[i - np] = sample[i];
    } else {
      pos[np++] = sample[i];
    }
  }
  float* d2 = work + m;
  kmeans1d(neg, nn, half, key ^ 0x4e454700ull, d2, centers);
  kmeans1d(pos, np, half, key ^ 0x504f5300ull, d2, centers + half);
  sort_small(centers, K);
  // Cluster statistics on the sample: share of items times spread decides the table sizes.
  double cnt[16], s1[16], s2[16], w[16];
  for (uint32_t c = 0; c < K; ++c)
    cnt[c] = s1[c] = s2[c] = 0.0;
  for (uint32_t i = 0; i < m; ++i) {
    uint32_t c = nearest(centers, K, sample[i]);
    cnt[c] += 1.0;
    s1[c] += sample[i];
    s2[c] += double(sample[i]) * sample[i];
  }
  double W = 0.0, Wc = 0.0;
  for (uint32_t c = 0; c < K; ++c) {
    double var = cnt[c] > 0 ? s2[c] / cnt[c] - (s1[c] / cnt[c]) * (s1[c] / cnt[c]) : 0.0;
    w[c] = cnt[c] * sqrt(var > 0.0 ? var : 0.0);
    W += w[c];
    Wc += cnt[c];
  }
  if (!(W > 0.0)) {
    for (uint32_t c = 0; c < K; ++c)
      w[c] = cnt[c];
    W = Wc;
  }
  uint32_t extra = buckets - K, given = 0, best = 0;
  for (uint32_t c = 0; c < K; ++c) {
    double f = W > 0.0 ? w[c] / W : 0.0;
    f = f > 0.0 ? (f < 1.0 ? f : 1.0) : 0.0;  // also maps NaN to 0
    uint32_t e = uint32_t(double(extra) * f);
    e = e > extra - given ? extra - given : e;
    sizes[c] = 1 + e;
    given += e;
    if (w[c] > w[best]) best = c;
  }
  sizes[best] += extra - given;
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
