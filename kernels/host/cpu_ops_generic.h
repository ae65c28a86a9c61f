// The generic CPU path's block kernels: flat loops over a block that the compiler vectorizes, for
// every CPU and compiler, and the reference the other paths match (codec_host_generic.cc
// stamps the drivers over them; the x86 paths use them for their tails).
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kernels/host/cpu_ops_common.h"

namespace sketchccl::kernels::detail {

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

}  // namespace sketchccl::kernels::detail
