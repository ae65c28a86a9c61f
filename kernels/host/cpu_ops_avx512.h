// The AVX-512 CPU path's block kernels (F, BW, DQ, VL: 16 lanes, the stream's 16 lanes one
// vector), taken where the CPU has them (codec_host_avx512.cc stamps the drivers over them).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/host/cpu_ops_common.h"
#include "kernels/host/cpu_ops_generic.h"
#include "kernels/host/cpu_x86_intrin.h"

#if defined(SCCL_X86_SIMD)
#define SCCL_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define SCCL_AVX512_INLINE SCCL_AVX512_TARGET inline __attribute__((always_inline))

namespace sketchccl::kernels::detail {

// Avx2Ops (cpu_ops_avx2.h) are these kernels at half the width, kept apart: only the intrinsics
// differ; the scalar constants both broadcast are cpu_ops_common.h's.
struct Avx512Ops {
  static SCCL_AVX512_INLINE __m512i mix32v(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(kMix32MulA)));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(kMix32MulB)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }
  // The 16 seeds of a block's stream (stream_seed of lanes 0 .. 15).
  static SCCL_AVX512_INLINE __m512i seeds(uint32_t k32) {
    const __m512i lane =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(int32_t(kStreamLaneMul)));
    return mix32v(_mm512_xor_si512(_mm512_set1_epi32(int32_t(k32)), lane));
  }
  // Every lane's next draw (stream_next).
  static SCCL_AVX512_INLINE __m512i next(__m512i x) {
    return _mm512_add_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(kStreamMul))),
                            _mm512_set1_epi32(int32_t(kStreamInc)));
  }
  static SCCL_AVX512_INLINE __m512 bytes_to_float(const uint8_t* c) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
  }

  // 64 int32 codes (four vectors, each below 2^15) as 64 bytes in order, clamped at L: two
  // saturating packs (in 128-bit lanes) and one permute, instead of four narrowing moves.
  template <uint32_t L>
  static SCCL_AVX512_INLINE void store64_sat(uint8_t* c, const __m512i code[4]) {
    const __m512i ab = _mm512_packus_epi32(code[0], code[1]);
    const __m512i de = _mm512_packus_epi32(code[2], code[3]);
    __m512i b = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
        _mm512_packus_epi16(ab, de));
    if constexpr (L < 255) b = _mm512_min_epu8(b, _mm512_set1_epi8(int8_t(L)));
    _mm512_storeu_si512(c, b);
  }

  static SCCL_AVX512_INLINE uint64_t nonzero64(const float* x) {
    const __m512 z = _mm512_setzero_ps();
    const __mmask16 m0 = _mm512_cmp_ps_mask(_mm512_loadu_ps(x), z, _CMP_NEQ_UQ);
    const __mmask16 m1 = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + 16), z, _CMP_NEQ_UQ);
    const __mmask16 m2 = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + 32), z, _CMP_NEQ_UQ);
    const __mmask16 m3 = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + 48), z, _CMP_NEQ_UQ);
    // Joined in mask registers (kunpck: the low half is the second operand).
    return _cvtmask64_u64(_mm512_kunpackd(_mm512_kunpackw(m3, m2), _mm512_kunpackw(m1, m0)));
  }
  static SCCL_AVX512_INLINE size_t scatter64(uint64_t word, const float* vals, float scale,
                                             float* y) {
    const __m512 vs = _mm512_set1_ps(scale);
    size_t k = 0;
    for (uint32_t q = 0; q < 4; ++q) {
      const uint32_t m = uint32_t(word >> (16 * q)) & 0xffffu;
      const uint32_t cnt = uint32_t(__builtin_popcount(m));
      const __m512 a = _mm512_maskz_loadu_ps(__mmask16((1u << cnt) - 1u), vals + k);
      const __mmask16 km = __mmask16(m);
      _mm512_storeu_ps(y + 16 * q, _mm512_maskz_mul_ps(km, _mm512_maskz_expand_ps(km, a), vs));
      k += cnt;
    }
    return k;
  }

  // The conversions are IEEE's (round to nearest even): float_to_half / half_to_float on every
  // value these loops see (NaN is canonical before a conversion to half; a NaN from half is
  // multiplied or added, which makes it quiet with the payload the scalar code keeps).
  static SCCL_AVX512_INLINE void half_run(const uint16_t* a, const float* x, size_t n,
                                          uint16_t* o) {
    const __m512 qn = _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(kQuietNanBits)));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i);
      if (a != nullptr) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
        v = _mm512_add_ps(_mm512_cvtph_ps(h), v);
      }
      v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qn);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i),
                          _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    GenericOps::half_run(a != nullptr ? a + i : nullptr, x + i, n - i, o + i);
  }
  static SCCL_AVX512_INLINE uint64_t half_decode(const uint16_t* a, size_t n, float mult,
                                                 float* y) {
    const __m512 vm = _mm512_set1_ps(mult);
    __m512i nz = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
      const __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), vm);
      _mm512_storeu_ps(y + i, v);
      nz = _mm512_mask_add_epi32(nz, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ), nz,
                                 _mm512_set1_epi32(1));
    }
    return uint64_t(_mm512_reduce_add_epi32(nz)) +
           GenericOps::half_decode(a + i, n - i, mult, y + i);
  }

  // bf16: float_to_bf16's rounding on the bits (a canonical NaN rounds to its quiet NaN, as the
  // scalar NaN case gives), bf16_to_float a shift.
  static SCCL_AVX512_INLINE void bf16_run(const uint16_t* a, const float* x, size_t n,
                                          uint16_t* o) {
    const __m512 qn = _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(kQuietNanBits)));
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i);
      if (a != nullptr) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
        v = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), v);
      }
      v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qn);
      const __m512i u = _mm512_castps_si512(v);
      const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      const __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(int32_t(kBf16RoundBias))), odd),
          16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm512_cvtepi32_epi16(r));
    }
    GenericOps::bf16_run(a != nullptr ? a + i : nullptr, x + i, n - i, o + i);
  }
  static SCCL_AVX512_INLINE uint64_t bf16_decode(const uint16_t* a, size_t n, float mult,
                                                 float* y) {
    const __m512 vm = _mm512_set1_ps(mult);
    __m512i nz = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
      const __m512 v =
          _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)), vm);
      _mm512_storeu_ps(y + i, v);
      nz = _mm512_mask_add_epi32(nz, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NEQ_UQ), nz,
                                 _mm512_set1_epi32(1));
    }
    return uint64_t(_mm512_reduce_add_epi32(nz)) +
           GenericOps::bf16_decode(a + i, n - i, mult, y + i);
  }

  static SCCL_AVX512_INLINE QRange q_sum(const uint8_t* c, float mn, float sc, const float* x,
                                         float* v) {
    __m512i smax = _mm512_set1_epi32(-0x7fffffff - 1), umax = _mm512_setzero_si512();
    __m512i umin = _mm512_set1_epi32(-1);
    const __m512 vmn = _mm512_set1_ps(mn), vsc = _mm512_set1_ps(sc);
    for (uint32_t i = 0; i < kBlock / 16; ++i) {
      __m512 a = _mm512_loadu_ps(x + 16 * i);
      if (c != nullptr) {
        a = _mm512_add_ps(_mm512_add_ps(vmn, _mm512_mul_ps(bytes_to_float(c + 16 * i), vsc)), a);
      }
      _mm512_storeu_ps(v + 16 * i, a);
      const __m512i u = _mm512_castps_si512(a);
      smax = _mm512_max_epi32(smax, u);
      umax = _mm512_max_epu32(umax, u);
      umin = _mm512_min_epu32(umin, u);
    }
    QBits qb;
    qb.smax = _mm512_reduce_max_epi32(smax);
    qb.umax = _mm512_reduce_max_epu32(umax);
    qb.umin = _mm512_reduce_min_epu32(umin);
    return qb.range();
  }
  template <uint32_t BITS>
  static SCCL_AVX512_INLINE void q_codes(const float* v, uint32_t k32, const QScale& s,
                                         uint8_t* c) {
    constexpr uint32_t S = kQShift<BITS>;
    const __m512 vmn = _mm512_set1_ps(s.mn), inv_s = _mm512_set1_ps(q_code_mult<BITS>(s));
    __m512i r = seeds(k32);
    for (uint32_t q = 0; q < kBlock / 64; ++q) {
      __m512i code[4];
      for (uint32_t h = 0; h < 4; ++h, r = next(r)) {
        const __m512i t = _mm512_cvttps_epi32(
            _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(v + 64 * q + 16 * h), vmn), inv_s));
        code[h] = _mm512_srli_epi32(_mm512_add_epi32(t, _mm512_srli_epi32(r, 32 - S)), S);
      }
      store64_sat<(1u << BITS) - 1u>(c + 64 * q, code);  // the clamp at L
    }
  }
  static SCCL_AVX512_INLINE uint64_t q_values(const uint8_t* c, float mn, float sc, float mult,
                                              float* y) {
    const __m512 vmn = _mm512_set1_ps(mn), vsc = _mm512_set1_ps(sc), vm = _mm512_set1_ps(mult);
    // Counted in a vector (GCC 12 can spill a mask in 16 bits and reload it in 32 for popcnt).
    __m512i nz = _mm512_setzero_si512();
    for (uint32_t i = 0; i < kBlock / 16; ++i) {
      const __m512 a =
          _mm512_mul_ps(_mm512_add_ps(vmn, _mm512_mul_ps(bytes_to_float(c + 16 * i), vsc)), vm);
      _mm512_storeu_ps(y + 16 * i, a);
      const __mmask16 m = _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      nz = _mm512_mask_add_epi32(nz, m, nz, _mm512_set1_epi32(1));
    }
    return uint64_t(_mm512_reduce_add_epi32(nz));
  }
  // casq_thresholds in registers: ls = lvl * (s * f), iv = 2^30 / (next ls - ls) where that
  // gap is at least 2^-97, else 0 (the last level included); lanes past K: ls +Inf, iv 0.
  template <uint32_t K>
  static SCCL_AVX512_INLINE void thresholds(const CasqLevels& lv, float s, float f, __m512* ls,
                                            __m512* iv) {
    const __mmask16 inside = __mmask16((1u << K) - 1u);
    const __m512 l = _mm512_mul_ps(_mm512_load_ps(lv.lvl), _mm512_set1_ps(s * f));
    *ls = _mm512_mask_blend_ps(inside, _mm512_set1_ps(u2f(kInfBits)), l);
    // The next level of each lane (lane c + 1), for the lanes below K - 1.
    const __m512 up = _mm512_permutexvar_ps(
        _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15), l);
    const __mmask16 below_last = __mmask16((1u << (K - 1)) - 1u);
    const __m512 gap = _mm512_maskz_sub_ps(below_last, up, l);
    const __mmask16 wide =
        _mm512_cmp_ps_mask(gap, _mm512_set1_ps(u2f(kCasqMinGapBits)), _CMP_GE_OQ);
    *iv = _mm512_maskz_div_ps(wide, _mm512_set1_ps(float(1u << kCasqShift)), gap);
  }
  template <uint32_t K>
  static SCCL_AVX512_INLINE void casq_values(const uint8_t* c, const CasqLevels& lv, const float* s,
                                             const float* x, float* v, uint32_t* mx) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    constexpr uint32_t kPerSub = uint32_t(kCasqSub) / 16;
    for (uint32_t q = 0; q < kCasqSubs; ++q) {
      const __m512 table = _mm512_mul_ps(_mm512_load_ps(lv.lvl), _mm512_set1_ps(s[q]));
      __m512i m = _mm512_setzero_si512();
      for (uint32_t i = q * kPerSub; i < (q + 1) * kPerSub; ++i) {
        const __m512i idx =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16 * i)));
        __m512 a = _mm512_permutexvar_ps(idx, table);
        if (x != nullptr) {
          a = _mm512_add_ps(a, _mm512_loadu_ps(x + 16 * i));
          m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_castps_si512(a), abs_mask));
        }
        _mm512_storeu_ps(v + 16 * i, a);
      }
      if (x != nullptr) mx[q] = _mm512_reduce_max_epu32(m);
    }
  }
  // One sub-block of 64 per iteration of the outer loop, with its scale's thresholds.
  static_assert(kCasqSub == 64, "casq_codes: a sub-block is one iteration of 4 vectors");
  template <uint32_t K>
  static SCCL_AVX512_INLINE void casq_codes(const float* v, const CasqLevels& lv, const float* s,
                                            uint32_t bkey, bool nearest, uint8_t* c) {
    __m512i draw = seeds(bkey);
    // Broadcasts of the levels compared first: 1 .. 3 (K = 4), or 4, 8, 12 (every fourth).
    constexpr uint32_t kStride = K == 4 ? 1 : 4;
    for (uint32_t q = 0; q < kBlock / 64; ++q) {
      const float fs = casq_prescale(s[q]);
      __m512 ls, iv;
      thresholds<K>(lv, s[q], fs, &ls, &iv);
      const __m512 f = _mm512_set1_ps(fs);
      const bool scaled = fs != 1.0f;
      __m512 lk[4];
      for (uint32_t k = 1; k < 4 && k * kStride < K; ++k)
        lk[k] = _mm512_permutexvar_ps(_mm512_set1_epi32(int32_t(k * kStride)), ls);
      __m512i code[4];
      for (uint32_t h = 0; h < 4; ++h, draw = next(draw)) {
        __m512 w = _mm512_loadu_ps(v + 64 * q + 16 * h);
        if (scaled) w = _mm512_mul_ps(w, f);
        // j = the count of levels 1 .. K - 1 at or below w (casq_code's), which for sorted
        // levels (ls[0] <= w) is the largest c with ls[c] <= w: first the count among every
        // kStride-th level (compares against broadcasts, in parallel), then a binary search
        // within that stride (a table lookup per step).
        __m512i j = _mm512_setzero_si512();
        const __m512i stride = _mm512_set1_epi32(int32_t(kStride));
        for (uint32_t k = 1; k < 4 && k * kStride < K; ++k) {
          const __mmask16 ge = _mm512_cmp_ps_mask(w, lk[k], _CMP_GE_OQ);
          j = _mm512_mask_add_epi32(j, ge, j, stride);
        }
        for (uint32_t step = kStride / 2; step >= 1; step /= 2) {
          const __m512i cand = _mm512_add_epi32(j, _mm512_set1_epi32(int32_t(step)));
          const __mmask16 le = _mm512_cmp_ps_mask(_mm512_permutexvar_ps(cand, ls), w, _CMP_LE_OQ);
          j = _mm512_mask_mov_epi32(j, le, cand);
        }
        const __m512 lo = _mm512_permutexvar_ps(j, ls), g = _mm512_permutexvar_ps(j, iv);
        __m512i p = _mm512_castps_si512(_mm512_mul_ps(_mm512_sub_ps(w, lo), g));
        p = _mm512_min_epi32(p, _mm512_set1_epi32(int32_t(kCasqPosMaxBits)));
        const __m512i pt = _mm512_cvttps_epi32(_mm512_castsi512_ps(p));
        const __m512i r = nearest ? _mm512_set1_epi32(int32_t(kNearestDraw)) : draw;
        const __m512i up = _mm512_srli_epi32(
            _mm512_add_epi32(pt, _mm512_srli_epi32(r, 32 - kCasqShift)), kCasqShift);
        code[h] = _mm512_add_epi32(j, up);
      }
      store64_sat<255>(c + 64 * q, code);  // codes below K: nothing to clamp
    }
  }
};

}  // namespace sketchccl::kernels::detail
#endif  // SCCL_X86_SIMD
