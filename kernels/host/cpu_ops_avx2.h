// The AVX2 CPU path's block kernels (AVX2 and F16C, x86-64-v3: 8 lanes, the stream's 16 lanes two
// vectors), taken where the CPU has them and no AVX-512 (codec_host_avx2.cc stamps the drivers
// over them).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/host/cpu_ops_common.h"
#include "kernels/host/cpu_ops_generic.h"
#include "kernels/host/cpu_x86_intrin.h"

#if defined(SCCL_X86_SIMD)
#define SCCL_AVX2_TARGET __attribute__((target("avx2,f16c")))
#define SCCL_AVX2_INLINE SCCL_AVX2_TARGET inline __attribute__((always_inline))

namespace sketchccl::kernels::detail {

// For an 8-bit mask m, lane l's source among the values packed for m: the count of set bits of m
// below l (0 where the bit is clear): AVX2's expand by a permute.
struct ExpandLut {
  alignas(32) int32_t idx[256][8];
};
constexpr ExpandLut make_expand_lut() {
  ExpandLut t{};
  for (uint32_t m = 0; m < 256; ++m) {
    int32_t r = 0;
    for (uint32_t l = 0; l < 8; ++l)
      t.idx[m][l] = (m >> l) & 1u ? r++ : 0;
  }
  return t;
}
inline constexpr ExpandLut kExpandLut = make_expand_lut();

// Avx512Ops' kernels at half the width (only the intrinsics differ, so they stay apart), but for
// scatter64 (a permute from kExpandLut: AVX2 has no expand) and casq_codes' level search (a count
// for K = 4, else a binary search over every level).
struct Avx2Ops {
  static SCCL_AVX2_INLINE __m256i mix32v(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(kMix32MulA)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(kMix32MulB)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }
  // Seeds of lanes 8h .. 8h + 7.
  static SCCL_AVX2_INLINE __m256i seeds(uint32_t k32, uint32_t h) {
    const __m256i lane =
        _mm256_mullo_epi32(_mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(int32_t(8 * h))),
                           _mm256_set1_epi32(int32_t(kStreamLaneMul)));
    return mix32v(_mm256_xor_si256(_mm256_set1_epi32(int32_t(k32)), lane));
  }
  static SCCL_AVX2_INLINE __m256i next(__m256i x) {
    return _mm256_add_epi32(_mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(kStreamMul))),
                            _mm256_set1_epi32(int32_t(kStreamInc)));
  }
  static SCCL_AVX2_INLINE __m256i bytes_to_i32(const uint8_t* c) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  }
  static SCCL_AVX2_INLINE uint32_t hmax_epi32(__m256i v) {
    __m128i a = _mm_max_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_max_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_max_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return uint32_t(_mm_cvtsi128_si32(a));
  }
  static SCCL_AVX2_INLINE uint32_t hmax_epu32(__m256i v) {
    __m128i a = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_max_epu32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_max_epu32(a, _mm_shuffle_epi32(a, 0xb1));
    return uint32_t(_mm_cvtsi128_si32(a));
  }
  static SCCL_AVX2_INLINE uint32_t hmin_epu32(__m256i v) {
    __m128i a = _mm_min_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_min_epu32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_min_epu32(a, _mm_shuffle_epi32(a, 0xb1));
    return uint32_t(_mm_cvtsi128_si32(a));
  }
  static SCCL_AVX2_INLINE uint32_t hsum_epi32(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return uint32_t(_mm_cvtsi128_si32(a));
  }
  // 32 int32 codes (four vectors, each < 2^15) as 32 bytes in order, saturated at 255.
  static SCCL_AVX2_INLINE void store32_sat(uint8_t* c, __m256i a, __m256i b, __m256i d, __m256i e) {
    const __m256i ab = _mm256_packus_epi32(a, b), de = _mm256_packus_epi32(d, e);
    const __m256i bytes = _mm256_packus_epi16(ab, de);  // per 128-bit lane: a b d e quarters
    const __m256i order =
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), order);
  }
  // A 16-entry table lookup (K = 16) from two halves; idx in [0, 16).
  static SCCL_AVX2_INLINE __m256 lookup16(__m256 lo, __m256 hi, __m256i idx) {
    const __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
    const __m256 high = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(a, b, high);
  }

  static SCCL_AVX2_INLINE uint64_t nonzero64(const float* x) {
    const __m256 z = _mm256_setzero_ps();
    uint64_t v = 0;
    for (uint32_t q = 0; q < 8; ++q) {
      const __m256 ne = _mm256_cmp_ps(_mm256_loadu_ps(x + 8 * q), z, _CMP_NEQ_UQ);
      v |= uint64_t(uint32_t(_mm256_movemask_ps(ne))) << (8 * q);
    }
    return v;
  }
  static SCCL_AVX2_INLINE size_t scatter64(uint64_t word, const float* vals, float scale,
                                           float* y) {
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    size_t k = 0;
    for (uint32_t q = 0; q < 8; ++q) {
      const uint32_t m = uint32_t(word >> (8 * q)) & 0xffu;
      const int32_t cnt = __builtin_popcount(m);
      // The cnt values for this group (masked lanes are not read), moved to their lanes.
      const __m256i first = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane);
      const __m256 a = _mm256_maskload_ps(vals + k, first);
      const __m256i idx = _mm256_load_si256(reinterpret_cast<const __m256i*>(kExpandLut.idx[m]));
      const __m256 sel = _mm256_castsi256_ps(
          _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int32_t(m)), bit), bit));
      const __m256 o = _mm256_and_ps(_mm256_mul_ps(_mm256_permutevar8x32_ps(a, idx), vs), sel);
      _mm256_storeu_ps(y + 8 * q, o);
      k += size_t(cnt);
    }
    return k;
  }

  // As Avx512Ops' (F16C's conversions).
  static SCCL_AVX2_INLINE void half_run(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
    const __m256 qn = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(kQuietNanBits)));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      if (a != nullptr) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
        v = _mm256_add_ps(_mm256_cvtph_ps(h), v);
      }
      v = _mm256_blendv_ps(v, qn, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                       _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    GenericOps::half_run(a != nullptr ? a + i : nullptr, x + i, n - i, o + i);
  }
  static SCCL_AVX2_INLINE uint64_t half_decode(const uint16_t* a, size_t n, float mult, float* y) {
    const __m256 vm = _mm256_set1_ps(mult);
    __m256i nz = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
      const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), vm);
      _mm256_storeu_ps(y + i, v);
      nz = _mm256_sub_epi32(
          nz, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
    }
    return uint64_t(hsum_epi32(nz)) + GenericOps::half_decode(a + i, n - i, mult, y + i);
  }

  static SCCL_AVX2_INLINE void bf16_run(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
    const __m256 qn = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(kQuietNanBits)));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      if (a != nullptr) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
        v = _mm256_add_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)), v);
      }
      v = _mm256_blendv_ps(v, qn, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      const __m256i u = _mm256_castps_si256(v);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(int32_t(kBf16RoundBias))), odd),
          16);
      // Values below 2^16: the signed-to-unsigned pack keeps them; then the halves in order.
      const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm256_castsi256_si128(w));
    }
    GenericOps::bf16_run(a != nullptr ? a + i : nullptr, x + i, n - i, o + i);
  }
  static SCCL_AVX2_INLINE uint64_t bf16_decode(const uint16_t* a, size_t n, float mult, float* y) {
    const __m256 vm = _mm256_set1_ps(mult);
    __m256i nz = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
      const __m256 v =
          _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)), vm);
      _mm256_storeu_ps(y + i, v);
      nz = _mm256_sub_epi32(
          nz, _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
    }
    return uint64_t(hsum_epi32(nz)) + GenericOps::bf16_decode(a + i, n - i, mult, y + i);
  }

  static SCCL_AVX2_INLINE QRange q_sum(const uint8_t* c, float mn, float sc, const float* x,
                                       float* v) {
    __m256i smax = _mm256_set1_epi32(-0x7fffffff - 1), umax = _mm256_setzero_si256();
    __m256i umin = _mm256_set1_epi32(-1);
    const __m256 vmn = _mm256_set1_ps(mn), vsc = _mm256_set1_ps(sc);
    for (uint32_t i = 0; i < kBlock / 8; ++i) {
      __m256 a = _mm256_loadu_ps(x + 8 * i);
      if (c != nullptr) {
        const __m256 cf = _mm256_cvtepi32_ps(bytes_to_i32(c + 8 * i));
        a = _mm256_add_ps(_mm256_add_ps(vmn, _mm256_mul_ps(cf, vsc)), a);
      }
      _mm256_storeu_ps(v + 8 * i, a);
      const __m256i u = _mm256_castps_si256(a);
      smax = _mm256_max_epi32(smax, u);
      umax = _mm256_max_epu32(umax, u);
      umin = _mm256_min_epu32(umin, u);
    }
    QBits qb;
    qb.smax = int32_t(hmax_epi32(smax));
    qb.umax = hmax_epu32(umax);
    qb.umin = hmin_epu32(umin);
    return qb.range();
  }
  template <uint32_t BITS>
  static SCCL_AVX2_INLINE void q_codes(const float* v, uint32_t k32, const QScale& s, uint8_t* c) {
    constexpr uint32_t S = kQShift<BITS>;
    const __m256 vmn = _mm256_set1_ps(s.mn), inv_s = _mm256_set1_ps(q_code_mult<BITS>(s));
    __m256i r[2] = {seeds(k32, 0), seeds(k32, 1)};  // lanes 0 .. 7 and 8 .. 15
    for (uint32_t q = 0; q < kBlock / 32; ++q) {
      __m256i code[4];
      for (uint32_t h = 0; h < 4; ++h) {
        const uint32_t e = 32 * q + 8 * h;  // elements e .. e + 7: lanes 8 (h & 1) .., draw e / 16
        const __m256i t =
            _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + e), vmn), inv_s));
        code[h] = _mm256_srli_epi32(_mm256_add_epi32(t, _mm256_srli_epi32(r[h & 1], 32 - S)), S);
        if (h & 1) {  // the next draws of every lane
          r[0] = next(r[0]);
          r[1] = next(r[1]);
        }
      }
      store32_sat(c + 32 * q, code[0], code[1], code[2], code[3]);  // the clamp at 255
      if constexpr (BITS != 8) {
        __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * q));
        b = _mm256_min_epu8(b, _mm256_set1_epi8(int8_t((1 << BITS) - 1)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 32 * q), b);
      }
    }
  }
  static SCCL_AVX2_INLINE uint64_t q_values(const uint8_t* c, float mn, float sc, float mult,
                                            float* y) {
    const __m256 vmn = _mm256_set1_ps(mn), vsc = _mm256_set1_ps(sc), vm = _mm256_set1_ps(mult);
    __m256i nz = _mm256_setzero_si256();
    for (uint32_t i = 0; i < kBlock / 8; ++i) {
      const __m256 cf = _mm256_cvtepi32_ps(bytes_to_i32(c + 8 * i));
      const __m256 a = _mm256_mul_ps(_mm256_add_ps(vmn, _mm256_mul_ps(cf, vsc)), vm);
      _mm256_storeu_ps(y + 8 * i, a);
      // The compare's all-ones lanes are -1: subtracting counts them.
      nz = _mm256_sub_epi32(
          nz, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NEQ_UQ)));
    }
    return uint64_t(hsum_epi32(nz));
  }
  // thresholds (Avx512Ops') as two halves: lanes 0 .. 7 and 8 .. 15.
  template <uint32_t K>
  static SCCL_AVX2_INLINE void thresholds(const CasqLevels& lv, float s, float f, __m256* ls,
                                          __m256* iv) {
    const __m256 sf = _mm256_set1_ps(s * f);
    const __m256 inf = _mm256_set1_ps(u2f(kInfBits));
    const __m256 l0 = _mm256_mul_ps(_mm256_load_ps(lv.lvl), sf);
    const __m256 l1 = _mm256_mul_ps(_mm256_load_ps(lv.lvl + 8), sf);
    // Each lane's next level: lane c + 1, across the halves for lane 7.
    const __m256i rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    const __m256 n0 =
        _mm256_blend_ps(_mm256_permutevar8x32_ps(l0, rot), _mm256_permutevar8x32_ps(l1, rot), 0x80);
    const __m256 n1 = _mm256_permutevar8x32_ps(l1, rot);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 two30 = _mm256_set1_ps(float(1u << kCasqShift));
    const __m256 tiny = _mm256_set1_ps(u2f(kCasqMinGapBits));
    for (uint32_t h = 0; h < 2; ++h) {
      const __m256i c = _mm256_add_epi32(lane, _mm256_set1_epi32(int32_t(8 * h)));
      const __m256 in = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(K)), c));
      const __m256 below_last =
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(K - 1)), c));
      const __m256 l = h == 0 ? l0 : l1;
      const __m256 gap = _mm256_and_ps(_mm256_sub_ps(h == 0 ? n0 : n1, l), below_last);
      const __m256 wide = _mm256_cmp_ps(gap, tiny, _CMP_GE_OQ);
      ls[h] = _mm256_blendv_ps(inf, l, in);
      // 2^30 / gap where wide (a gap of 0 is not: no division by zero reaches the result).
      iv[h] = _mm256_and_ps(_mm256_div_ps(two30, _mm256_blendv_ps(two30, gap, wide)), wide);
    }
  }
  template <uint32_t K>
  static SCCL_AVX2_INLINE __m256 lookup(const __m256* t, __m256i idx) {
    if constexpr (K <= 8) {
      return _mm256_permutevar8x32_ps(t[0], idx);
    } else {
      return lookup16(t[0], t[1], idx);
    }
  }
  template <uint32_t K>
  static SCCL_AVX2_INLINE void casq_values(const uint8_t* c, const CasqLevels& lv, const float* s,
                                           const float* x, float* v, uint32_t* mx) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    constexpr uint32_t kPerSub = uint32_t(kCasqSub) / 8;
    for (uint32_t q = 0; q < kCasqSubs; ++q) {
      const __m256 vs = _mm256_set1_ps(s[q]);
      const __m256 t[2] = {_mm256_mul_ps(_mm256_load_ps(lv.lvl), vs),
                           _mm256_mul_ps(_mm256_load_ps(lv.lvl + 8), vs)};
      __m256i m = _mm256_setzero_si256();
      for (uint32_t i = q * kPerSub; i < (q + 1) * kPerSub; ++i) {
        __m256 a = lookup<K>(t, bytes_to_i32(c + 8 * i));
        if (x != nullptr) {
          a = _mm256_add_ps(a, _mm256_loadu_ps(x + 8 * i));
          m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(a), abs_mask));
        }
        _mm256_storeu_ps(v + 8 * i, a);
      }
      if (x != nullptr) mx[q] = hmax_epu32(m);
    }
  }
  // Two iterations of 32 of the outer loop per sub-block of 64, with its scale's thresholds.
  static_assert(kCasqSub == 64, "casq_codes: a sub-block is two iterations of 4 vectors");
  template <uint32_t K>
  static SCCL_AVX2_INLINE void casq_codes(const float* v, const CasqLevels& lv, const float* s,
                                          uint32_t bkey, bool nearest, uint8_t* c) {
    __m256 ls[2], iv[2], f = _mm256_set1_ps(1.0f);
    bool scaled = false;
    __m256 lk[K];  // broadcasts of levels 1 .. K - 1 for the count (K = 4)
    __m256i draw[2] = {seeds(bkey, 0), seeds(bkey, 1)};
    for (uint32_t q = 0; q < kBlock / 32; ++q) {
      if (q % 2 == 0) {
        const float fs = casq_prescale(s[q / 2]);
        thresholds<K>(lv, s[q / 2], fs, ls, iv);
        f = _mm256_set1_ps(fs);
        scaled = fs != 1.0f;
        for (uint32_t k = 1; k < K && K == 4; ++k)
          lk[k] = _mm256_permutevar8x32_ps(ls[0], _mm256_set1_epi32(int32_t(k)));
      }
      __m256i code[4];
      for (uint32_t h = 0; h < 4; ++h) {
        const uint32_t e = 32 * q + 8 * h;
        __m256 w = _mm256_loadu_ps(v + e);
        if (scaled) w = _mm256_mul_ps(w, f);
        __m256i j = _mm256_setzero_si256();
        if constexpr (K == 4) {
          for (uint32_t k = 1; k < K; ++k) {
            const __m256 ge = _mm256_cmp_ps(w, lk[k], _CMP_GE_OQ);
            j = _mm256_sub_epi32(j, _mm256_castps_si256(ge));  // mask -1: one more
          }
        } else {
          for (uint32_t step = K / 2; step >= 1; step /= 2) {
            const __m256i cand = _mm256_add_epi32(j, _mm256_set1_epi32(int32_t(step)));
            const __m256 le = _mm256_cmp_ps(lookup<K>(ls, cand), w, _CMP_LE_OQ);
            j = _mm256_castps_si256(
                _mm256_blendv_ps(_mm256_castsi256_ps(j), _mm256_castsi256_ps(cand), le));
          }
        }
        const __m256 lo = lookup<K>(ls, j), g = lookup<K>(iv, j);
        __m256i p = _mm256_castps_si256(_mm256_mul_ps(_mm256_sub_ps(w, lo), g));
        p = _mm256_min_epi32(p, _mm256_set1_epi32(int32_t(kCasqPosMaxBits)));
        const __m256i pt = _mm256_cvttps_epi32(_mm256_castsi256_ps(p));
        const __m256i r = nearest ? _mm256_set1_epi32(int32_t(kNearestDraw)) : draw[h & 1];
        const __m256i up = _mm256_srli_epi32(
            _mm256_add_epi32(pt, _mm256_srli_epi32(r, 32 - kCasqShift)), kCasqShift);
        code[h] = _mm256_add_epi32(j, up);
        if (h & 1) {
          draw[0] = next(draw[0]);
          draw[1] = next(draw[1]);
        }
      }
      store32_sat(c + 32 * q, code[0], code[1], code[2], code[3]);  // codes < K: no saturation
    }
  }
};

}  // namespace sketchccl::kernels::detail
#endif  // SCCL_X86_SIMD
