// The CPU build's block kernels of q* and CASQ, as interchangeable "ops" policies of the drivers
// in kernels/host/codec_paths.inc: GenericOps (flat loops the compiler vectorizes: every CPU and
// compiler, and the reference), Avx2Ops and Avx512Ops (x86 intrinsics, picked at run time by the
// CPU). Every policy computes the same IEEE operations in the same order as the SCCL_HD routines
// of q_block.h / codec_impl.h (no fused multiply-add, integer steps exact), so every path writes
// the same bytes as the others and as the CUDA build (tests/unit/kernels/codec_paths_test.cc
// runs each path the CPU has against the generic one).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/casq_fit.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SCCL_X86_SIMD 1
// GCC 12 warns about the intrinsics' own undefined pass-through operands once they are inlined
// (its uninitialized-use warnings check the header's lines): off for the header alone.
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#endif

namespace sketchccl::kernels::detail {

// ---- which path -------------------------------------------------------------------------------
enum class CpuPath : int { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };
// The path the codecs use: the best the CPU has, unless a CpuPathScope of this thread says
// otherwise.
CpuPath cpu_path();
bool cpu_path_available(CpuPath p);
// Runs the codecs of this thread on path p (for tests comparing the paths); p must be available.
class CpuPathScope {
 public:
  explicit CpuPathScope(CpuPath p);
  ~CpuPathScope();
  CpuPathScope(const CpuPathScope&) = delete;
  CpuPathScope& operator=(const CpuPathScope&) = delete;

 private:
  int prev_;
};

// Bulk kernels of the sparse helpers and s2 on the path cpu_path() picks (whole 64-element
// words of fp32): bits[w] = the non-zero elements (NaN is non-zero, -0 zero) of x[64w, 64w + 64);
// y[64w + j] = vals[k] * scale for the k-th set bit of the words, +0 elsewhere (returns the
// values read).
void cpu_nonzero_words(const float* x, size_t words, uint64_t* bits);
size_t cpu_scatter_words(const uint64_t* bits, size_t words, const float* vals, float scale,
                         float* y);

// ---- the stream's jumps: draw i of a lane is seed * a[i] + c[i] (stream_next i times) ---------
struct StreamJumps {
  uint32_t a[kBlock / kStreamLanes];
  uint32_t c[kBlock / kStreamLanes];
};
constexpr StreamJumps make_stream_jumps() {
  StreamJumps t{};
  uint32_t a = 1, c = 0;
  for (uint32_t i = 0; i < kBlock / kStreamLanes; ++i) {
    t.a[i] = a;
    t.c[i] = c;
    // One more step: x * a + c  ->  (x * a + c) * A + C.
    a = a * 747796405u;
    c = c * 747796405u + 2891336453u;
  }
  return t;
}
inline constexpr StreamJumps kStreamJumps = make_stream_jumps();
static_assert(kStreamJumps.a[1] == 747796405u && kStreamJumps.c[1] == 2891336453u,
              "the jumps are stream_next's steps");

// A slice's CASQ levels padded to 16 for table lookups (read once per slice: the per-block
// tables are formed in registers, not stored and reloaded). Past K: 0.
struct CasqLevels {
  alignas(64) float lvl[kCasqMaxK];
};
template <uint32_t K>
SCCL_CPU_INLINE void casq_levels(const float* lvl, CasqLevels* l) {
  for (uint32_t c = 0; c < kCasqMaxK; ++c)
    l->lvl[c] = c < K ? lvl[c] : 0.0f;
}

// A block's CASQ codes as bytes and back (q_block.h's word loops); a partial last block has
// only its `groups` groups in the packet.
template <uint32_t BITS>
SCCL_CPU_INLINE void casq_codes_unpack(const uint8_t* codes, uint32_t groups, uint8_t* c) {
  if (groups == kQLanes) {
    q_codes_unpack<BITS>(codes, c);
  } else {
    uint8_t whole[kBlock * BITS / 8] = {};
    memcpy(whole, codes, groups * BITS);
    q_codes_unpack<BITS>(whole, c);
  }
}
template <uint32_t BITS>
SCCL_CPU_INLINE void casq_codes_pack(const uint8_t* c, uint32_t groups, uint8_t* codes) {
  if (groups == kQLanes) {
    q_codes_pack<BITS>(c, codes);
  } else {
    uint8_t whole[kBlock * BITS / 8];
    q_codes_pack<BITS>(c, whole);
    memcpy(codes, whole, groups * BITS);
  }
}

// A packet's CASQ parts (the incoming one of a step: read before the step overwrites them when
// in == out).
struct CasqView {
  const float* table;
  const uint16_t* scales;  // bf16, one per kCasqSub elements
  const uint64_t* nf;
  const uint8_t* codes;
  CasqView(const CasqLayout& L, const uint8_t* pkt)
      : table(reinterpret_cast<const float*>(pkt + L.table_off)),
        scales(reinterpret_cast<const uint16_t*>(pkt + L.scales_off)),
        nf(reinterpret_cast<const uint64_t*>(pkt + L.nf_off)),
        codes(pkt + L.codes_off) {}
};

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

// ---- generic: flat loops over a block --------------------------------------------------------
struct GenericOps {
  static SCCL_CPU_INLINE uint64_t nonzero64(const float* x) {
    uint64_t v = 0;
    for (uint32_t j = 0; j < 64; ++j)
      v |= uint64_t(x[j] != 0.0f) << j;
    return v;
  }
  // y[j] for a word's 64 elements; returns the values read.
  static SCCL_CPU_INLINE size_t scatter64(uint64_t word, const float* vals, float scale, float* y) {
    size_t k = 0;
    for (uint32_t j = 0; j < 64; ++j) {
      float o = 0.0f;
      if ((word >> j) & 1) o = vals[k++] * scale;
      y[j] = o;
    }
    return k;
  }
  // fp16 cast packets of fp32 slices: o[i] = half(canon(half(a[i]) + x[i])) (a null: encode, no
  // addition), and their decode y[i] = half(a[i]) * mult with the count of non-zero outputs.
  static SCCL_CPU_INLINE void half_run(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
    if (a != nullptr) {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_half(canon_nan(half_to_float(a[i]) + x[i]));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_half(canon_nan(x[i]));
    }
  }
  static SCCL_CPU_INLINE uint64_t half_decode(const uint16_t* a, size_t n, float mult, float* y) {
    uint64_t nz = 0;
    for (size_t i = 0; i < n; ++i) {
      y[i] = half_to_float(a[i]) * mult;
      nz += y[i] != 0.0f;
    }
    return nz;
  }
  // The same for bf16 cast packets.
  static SCCL_CPU_INLINE void bf16_run(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
    if (a != nullptr) {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(bf16_to_float(a[i]) + x[i]));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(x[i]));
    }
  }
  static SCCL_CPU_INLINE uint64_t bf16_decode(const uint16_t* a, size_t n, float mult, float* y) {
    uint64_t nz = 0;
    for (size_t i = 0; i < n; ++i) {
      y[i] = bf16_to_float(a[i]) * mult;
      nz += y[i] != 0.0f;
    }
    return nz;
  }

  // v[j] = min + c[j] * scale + x[j] (c null: v[j] = x[j]) for the 256 values of a block, and
  // their range (q_block.h's QBits).
  static SCCL_CPU_INLINE QRange q_sum(const uint8_t* c, float mn, float sc, const float* x,
                                      float* v) {
    QBits qb;
    if (c != nullptr) {
      for (uint32_t j = 0; j < kBlock; ++j) {
        v[j] = q_value(c[j], mn, sc) + x[j];
        qb.add(f2u(v[j]));
      }
    } else {
      for (uint32_t j = 0; j < kBlock; ++j) {
        v[j] = x[j];
        qb.add(f2u(v[j]));
      }
    }
    return qb.range();
  }
  // q_block_codes' fast path.
  template <uint32_t BITS>
  static SCCL_CPU_INLINE void q_codes(const float* v, uint32_t k32, const QScale& s, uint8_t* c) {
    q_block_codes<BITS, true>(v, k32, s, c);
  }
  // y[j] = (min + c[j] * scale) * mult, and the count of non-zero outputs.
  static SCCL_CPU_INLINE uint64_t q_values(const uint8_t* c, float mn, float sc, float mult,
                                           float* y) {
    uint64_t nz = 0;
    for (uint32_t j = 0; j < kBlock; ++j) {
      y[j] = q_value(c[j], mn, sc) * mult;
      nz += y[j] != 0.0f;
    }
    return nz;
  }
  // v[j] = lvl[c[j]] * s[j / kCasqSub] (+ x[j] when x is given) for a block of kCasqSubs scales;
  // with x, m[q] = the largest |v| as bits (casq_abs_bits) of sub-block q.
  template <uint32_t K>
  static SCCL_CPU_INLINE void casq_values(const uint8_t* c, const CasqLevels& lv, const float* s,
                                          const float* x, float* v, uint32_t* m) {
    for (uint32_t q = 0; q < kCasqSubs; ++q) {
      float l[K];  // locals: the stores to v cannot alias them
      for (uint32_t k = 0; k < K; ++k)
        l[k] = lv.lvl[k] * s[q];
      const uint32_t j0 = q * uint32_t(kCasqSub);
      for (uint32_t j = j0; j < j0 + kCasqSub; ++j) {
        float a = l[0];
        if constexpr (K >= 8) {
          a = l[c[j]];  // a lookup: K - 1 selects cost more
        } else {
          for (uint32_t k = 1; k < K; ++k)
            a = c[j] == k ? l[k] : a;
        }
        v[j] = a;
      }
      if (x == nullptr) continue;
      uint32_t mq = 0;
      for (uint32_t j = j0; j < j0 + kCasqSub; ++j) {
        v[j] = v[j] + x[j];
        const uint32_t b = casq_abs_bits(v[j]);
        mq = b > mq ? b : mq;
      }
      m[q] = mq;
    }
  }
  // Codes of a finite block's 256 values (scales s, one per sub-block): casq_code of v * f (v
  // itself when f is 1: v * 1 is v) against the sub-block's thresholds, with the stream's draws
  // (one half when nearest).
  template <uint32_t K>
  static SCCL_CPU_INLINE void casq_codes(const float* v, const CasqLevels& lv, const float* s,
                                         uint32_t bkey, bool nearest, uint8_t* c) {
    uint32_t r[kBlock];
    if (nearest) {
      for (uint32_t j = 0; j < kBlock; ++j)
        r[j] = 0x80000000u;
    } else {
      stream_block(bkey, r);
    }
    for (uint32_t q = 0; q < kCasqSubs; ++q) {
      CasqThresholds t;
      casq_thresholds<K>(lv.lvl, s[q], &t);
      const float f = t.f;
      const uint32_t j0 = q * uint32_t(kCasqSub);
      if (f != 1.0f) {
        for (uint32_t j = j0; j < j0 + kCasqSub; ++j)
          c[j] = uint8_t(casq_code<K>(v[j] * f, t, r[j]));
      } else {
        for (uint32_t j = j0; j < j0 + kCasqSub; ++j)
          c[j] = uint8_t(casq_code<K>(v[j], t, r[j]));
      }
    }
  }
};

#if defined(SCCL_X86_SIMD)
// ---- AVX-512 (F, BW, DQ, VL): 16 lanes, the stream's 16 lanes one vector -----------------------
#define SCCL_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define SCCL_AVX512_INLINE SCCL_AVX512_TARGET inline __attribute__((always_inline))

struct Avx512Ops {
  static SCCL_AVX512_INLINE __m512i mix32v(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(0x846ca68bu)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }
  // The 16 seeds of a block's stream (stream_seed of lanes 0 .. 15).
  static SCCL_AVX512_INLINE __m512i seeds(uint32_t k32) {
    const __m512i lane =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(int32_t(0x9e3779b9u)));
    return mix32v(_mm512_xor_si512(_mm512_set1_epi32(int32_t(k32)), lane));
  }
  // Every lane's next draw (stream_next).
  static SCCL_AVX512_INLINE __m512i next(__m512i x) {
    return _mm512_add_epi32(_mm512_mullo_epi32(x, _mm512_set1_epi32(int32_t(747796405u))),
                            _mm512_set1_epi32(int32_t(2891336453u)));
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
    const __m512 qn = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
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
    const __m512 qn = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
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
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
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
    const __m512 vmn = _mm512_set1_ps(s.mn), inv_s = _mm512_set1_ps(s.inv * float(1u << S));
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
    *ls = _mm512_mask_blend_ps(inside, _mm512_set1_ps(u2f(0x7f800000u)), l);
    // The next level of each lane (lane c + 1), for the lanes below K - 1.
    const __m512 up = _mm512_permutexvar_ps(
        _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 15), l);
    const __mmask16 below_last = __mmask16((1u << (K - 1)) - 1u);
    const __m512 gap = _mm512_maskz_sub_ps(below_last, up, l);
    const __mmask16 wide = _mm512_cmp_ps_mask(gap, _mm512_set1_ps(u2f(0x0f000000u)), _CMP_GE_OQ);
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
        p = _mm512_min_epi32(p, _mm512_set1_epi32(0x4e800000));  // 2^30
        const __m512i pt = _mm512_cvttps_epi32(_mm512_castsi512_ps(p));
        const __m512i r = nearest ? _mm512_set1_epi32(int32_t(0x80000000u)) : draw;
        const __m512i up = _mm512_srli_epi32(
            _mm512_add_epi32(pt, _mm512_srli_epi32(r, 32 - kCasqShift)), kCasqShift);
        code[h] = _mm512_add_epi32(j, up);
      }
      store64_sat<255>(c + 64 * q, code);  // codes below K: nothing to clamp
    }
  }
};

// ---- AVX2 and F16C (x86-64-v3): 8 lanes, the stream's 16 lanes two vectors
// ---------------------------
#define SCCL_AVX2_TARGET __attribute__((target("avx2,f16c")))
#define SCCL_AVX2_INLINE SCCL_AVX2_TARGET inline __attribute__((always_inline))

struct Avx2Ops {
  static SCCL_AVX2_INLINE __m256i mix32v(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(0x846ca68bu)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }
  // Seeds of lanes 8h .. 8h + 7.
  static SCCL_AVX2_INLINE __m256i seeds(uint32_t k32, uint32_t h) {
    const __m256i lane =
        _mm256_mullo_epi32(_mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(int32_t(8 * h))),
                           _mm256_set1_epi32(int32_t(0x9e3779b9u)));
    return mix32v(_mm256_xor_si256(_mm256_set1_epi32(int32_t(k32)), lane));
  }
  static SCCL_AVX2_INLINE __m256i next(__m256i x) {
    return _mm256_add_epi32(_mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(747796405u))),
                            _mm256_set1_epi32(int32_t(2891336453u)));
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
    const __m256 qn = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
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
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(nz), _mm256_extracti128_si256(nz, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return uint64_t(uint32_t(_mm_cvtsi128_si32(t))) +
           GenericOps::half_decode(a + i, n - i, mult, y + i);
  }

  static SCCL_AVX2_INLINE void bf16_run(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
    const __m256 qn = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
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
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
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
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(nz), _mm256_extracti128_si256(nz, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return uint64_t(uint32_t(_mm_cvtsi128_si32(t))) +
           GenericOps::bf16_decode(a + i, n - i, mult, y + i);
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
    const __m256 vmn = _mm256_set1_ps(s.mn), inv_s = _mm256_set1_ps(s.inv * float(1u << S));
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
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(nz), _mm256_extracti128_si256(nz, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return uint64_t(uint32_t(_mm_cvtsi128_si32(t)));
  }
  // thresholds (Avx512Ops') as two halves: lanes 0 .. 7 and 8 .. 15.
  template <uint32_t K>
  static SCCL_AVX2_INLINE void thresholds(const CasqLevels& lv, float s, float f, __m256* ls,
                                          __m256* iv) {
    const __m256 sf = _mm256_set1_ps(s * f);
    const __m256 inf = _mm256_set1_ps(u2f(0x7f800000u));
    const __m256 l0 = _mm256_mul_ps(_mm256_load_ps(lv.lvl), sf);
    const __m256 l1 = _mm256_mul_ps(_mm256_load_ps(lv.lvl + 8), sf);
    // Each lane's next level: lane c + 1, across the halves for lane 7.
    const __m256i rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    const __m256 n0 =
        _mm256_blend_ps(_mm256_permutevar8x32_ps(l0, rot), _mm256_permutevar8x32_ps(l1, rot), 0x80);
    const __m256 n1 = _mm256_permutevar8x32_ps(l1, rot);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 two30 = _mm256_set1_ps(float(1u << kCasqShift));
    const __m256 tiny = _mm256_set1_ps(u2f(0x0f000000u));
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
        p = _mm256_min_epi32(p, _mm256_set1_epi32(0x4e800000));  // 2^30
        const __m256i pt = _mm256_cvttps_epi32(_mm256_castsi256_ps(p));
        const __m256i r = nearest ? _mm256_set1_epi32(int32_t(0x80000000u)) : draw[h & 1];
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
#endif  // SCCL_X86_SIMD

}  // namespace sketchccl::kernels::detail
