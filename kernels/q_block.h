// q*: blockwise uniform quantization with stochastic rounding, one record per block of 256:
// float min, float scale, 256 codes of BITS bits (docs/codecs.md). A block is worked on as 32
// lanes of 8 consecutive elements: a CUDA warp runs one lane per thread (kernels/cuda/), the CPU
// runs the lanes in a loop (q_step_block below). Lanes meet only at the block's range (min,
// max, any non-finite), an exact reduction whose result does not depend on the order, so both
// builds write the same bytes.
#pragma once

#include "kernels/group_io.h"

namespace sketchccl::kernels::detail {

constexpr uint32_t kQLanes = kBlock / kGroup;  // 32: one warp per record on the device

SCCL_HD_INLINE size_t q_record_bytes(uint32_t bits) {
  return 8 + kBlock * bits / 8;
}
SCCL_HD_INLINE uint32_t q_block_key(uint64_t key, size_t blk) {
  return uint32_t(mix64(key ^ (uint64_t(blk) * 0xd1b54a32d192ed03ull)));
}
// Elements of lane `lane` in a block of cnt (0 to 8).
SCCL_HD_INLINE uint32_t q_lane_count(uint32_t lane, size_t cnt) {
  const size_t j0 = size_t(lane) * kGroup;
  return cnt > j0 ? uint32_t(cnt - j0 < kGroup ? cnt - j0 : kGroup) : 0u;
}

struct QRange {
  float lo, hi;
  uint32_t nonfinite;
};
SCCL_HD_INLINE QRange q_range_lane(const float v[8], uint32_t cnt) {
  QRange r{u2f(0x7f800000u), u2f(0xff800000u), 0u};  // +Inf, -Inf: the empty range
  for (uint32_t k = 0; k < kGroup; ++k) {
    if (k >= cnt) break;
    r.lo = v[k] < r.lo ? v[k] : r.lo;
    r.hi = v[k] > r.hi ? v[k] : r.hi;
    r.nonfinite |= uint32_t(!is_finite(v[k]));
  }
  return r;
}
SCCL_HD_INLINE QRange q_range_merge(QRange a, const QRange& b) {
  a.lo = b.lo < a.lo ? b.lo : a.lo;
  a.hi = b.hi > a.hi ? b.hi : a.hi;
  a.nonfinite |= b.nonfinite;
  return a;
}

struct QScale {
  float mn, sc, inv;
};
// The record's min and scale. Non-finite input makes both NaN, so the block decodes as NaN.
template <uint32_t BITS>
SCCL_HD_INLINE QScale q_scale(const QRange& r) {
  constexpr float L = float((1u << BITS) - 1u);
  // + 0.0f turns -0 into +0: which zero a min of {0, -0} keeps depends on the lanes' order.
  QScale s{r.lo + 0.0f, 0.0f, 0.0f};
  const float mx = r.hi + 0.0f;
  s.sc = mx / L - s.mn / L;  // no overflow for finite min and max
  if (r.nonfinite) {
    s.mn = qnan();
    s.sc = qnan();
  }
  s.inv = (!r.nonfinite && s.sc > 0.0f) ? 1.0f / s.sc : 0.0f;
  return s;
}

// Code of value v, element j of the block. Stochastic rounding: floor(u) + (uniform < frac(u)),
// with int32 conversions (u < 2^8), which vectorize on the CPU.
template <uint32_t BITS>
SCCL_HD_INLINE int32_t q_code(float v, uint32_t j, uint32_t k32, const QScale& s) {
  constexpr uint32_t L = (1u << BITS) - 1u;
  const float t = (v - s.mn) * s.inv;
  // u = t clamped to [0, L], NaN and -0 to +0, on the bits (a mask, a signed max, an unsigned
  // min: three vector operations on the CPU, where float selects cost several): NaN is masked
  // to 0, negatives (sign bit set) are below 0 as int32, and non-negative floats order as their
  // bits.
  int32_t b = int32_t(f2u(t) & (0u - uint32_t(t == t)));
  b = b > 0 ? b : 0;
  const uint32_t ub = uint32_t(b) < f2u(float(L)) ? uint32_t(b) : f2u(float(L));
  const float u = u2f(ub);
  const int32_t fl = int32_t(u);
  const int32_t c = fl + int32_t(uniform24(k32, j) < u - float(fl));
  return c > int32_t(L) ? int32_t(L) : c;
}
SCCL_HD_INLINE float q_value(uint32_t code, float mn, float sc) {
  return mn + float(int32_t(code)) * sc;
}

// ---- the codes of a record, the one packing of both builds: each group of 8 codes is BITS
// little-endian bytes, code k at bit k * BITS. A CUDA lane packs and unpacks its own group, the
// CPU a whole record at once (flat byte loops it vectorizes).

// The 8 codes of a group as one word.
template <uint32_t BITS>
SCCL_HD_INLINE uint64_t q_pack8(const int32_t code[8]) {
  uint64_t w = 0;
  for (uint32_t k = 0; k < kGroup; ++k)
    w |= uint64_t(uint32_t(code[k])) << (k * BITS);
  return w;
}
// Packs code[0 .. 8 groups) into `groups` groups at out.
template <uint32_t BITS>
SCCL_HD_INLINE void q_store_codes(const int32_t* code, uint32_t groups, uint8_t* out) {
  // Whole codes per byte (q8, q4, q2): byte b holds codes per b .. per b + per - 1, lowest first.
  if constexpr (8 % BITS == 0) {
    constexpr uint32_t per = 8 / BITS;
    for (uint32_t b = 0; b < groups * BITS; ++b) {
      uint32_t byte = 0;
      for (uint32_t k = 0; k < per; ++k)
        byte |= uint32_t(code[b * per + k]) << (k * BITS);
      out[b] = uint8_t(byte);
    }
  } else {
    for (uint32_t g = 0; g < groups; ++g)
      store_le<BITS>(out + g * BITS, q_pack8<BITS>(code + g * kGroup));
  }
}
// Values (min + code * scale) of the first cnt codes at `codes` into v[0 .. cnt).
template <uint32_t BITS>
SCCL_HD_INLINE void q_load_values(const uint8_t* codes, size_t cnt, float mn, float sc, float* v) {
  if constexpr (8 % BITS == 0) {
    constexpr uint32_t per = 8 / BITS, mask = (1u << BITS) - 1u;
    const size_t whole = cnt / per;
    for (size_t b = 0; b < whole; ++b) {
      for (uint32_t k = 0; k < per; ++k)
        v[b * per + k] = q_value((uint32_t(codes[b]) >> (k * BITS)) & mask, mn, sc);
    }
    for (size_t j = whole * per; j < cnt; ++j)
      v[j] = q_value((uint32_t(codes[j / per]) >> ((j % per) * BITS)) & mask, mn, sc);
  } else {
    for (size_t g = 0; g * kGroup < cnt; ++g) {
      const uint64_t w = load_le<BITS>(codes + g * BITS);
      for (uint32_t k = 0; k < kGroup && g * kGroup + k < cnt; ++k)
        v[g * kGroup + k] = q_value(code_of<BITS>(w, k), mn, sc);
    }
  }
}

// Codes of a lane's values (elements j0 .. j0 + 7 of the block); 0 past cnt.
template <uint32_t BITS>
SCCL_HD_INLINE void q_lane_codes(const float v[8], uint32_t cnt, uint32_t j0, uint32_t k32,
                                 const QScale& s, int32_t code[8]) {
  for (uint32_t k = 0; k < kGroup; ++k)
    code[k] = k < cnt ? q_code<BITS>(v[k], j0 + k, k32, s) : 0;
}
SCCL_HD_INLINE void q_record_scale(const uint8_t* rec, float* mn, float* sc) {
  memcpy(mn, rec, 4);
  memcpy(sc, rec + 4, 4);
}

// A lane's input: elements [base + 8 lane, +cnt) of x, plus the incoming record's values when
// in_rec is given (the fused step).
template <uint32_t BITS, int ET>
SCCL_HD_INLINE void q_lane_load(const uint8_t* in_rec, const void* x, size_t base, uint32_t lane,
                                uint32_t cnt, float v[8]) {
  load8<ET>(x, base + size_t(lane) * kGroup, cnt, v);
  if (in_rec == nullptr) return;
  float mn, sc, a[kGroup];
  q_record_scale(in_rec, &mn, &sc);
  q_load_values<BITS>(in_rec + 8 + lane * BITS, kGroup, mn, sc, a);
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = k < cnt ? a[k] + v[k] : 0.0f;
}
// The lane's part of the output record (its codes); lane 0 also writes min and scale.
template <uint32_t BITS>
SCCL_HD_INLINE void q_lane_store(uint8_t* out_rec, uint32_t lane, const float v[8], uint32_t cnt,
                                 uint32_t k32, const QScale& s) {
  int32_t code[kGroup];
  q_lane_codes<BITS>(v, cnt, lane * kGroup, k32, s, code);
  q_store_codes<BITS>(code, 1, out_rec + 8 + lane * BITS);
  if (lane == 0) {
    memcpy(out_rec, &s.mn, 4);
    memcpy(out_rec + 4, &s.sc, 4);
  }
}

// Values of one record (cnt <= 256) into v.
template <uint32_t BITS>
SCCL_HD_INLINE void q_unpack_record(const uint8_t* rec, size_t cnt, float* v) {
  float mn, sc;
  q_record_scale(rec, &mn, &sc);
  q_load_values<BITS>(rec + 8, cnt, mn, sc, v);
}

// A float's bits as an int32 that orders like the float's value (-0 just below +0): the CPU
// takes a block's min and max of finite values as integer reductions, which vectorize. The map
// is its own inverse.
SCCL_HD_INLINE int32_t q_order_key(uint32_t u) {
  return int32_t(u ^ (uint32_t(int32_t(u) >> 31) & 0x7fffffffu));
}

// The CPU's driver of one block of cnt elements (cnt <= 256) from base: encode (in_rec null) or
// the fused step. The CUDA build runs the same routines one lane per thread (kernels/cuda/);
// here every stage is one flat loop over the block (called with cnt = 256 as a constant for
// whole blocks), so the compiler vectorizes each. The range is an integer min/max of order keys:
// the same finite min and max as the warp's float reduction (q_scale's + 0.0f makes the order
// of -0 and +0 moot, and any non-finite value makes min and scale NaN whatever they were).
template <uint32_t BITS, int ET>
SCCL_CPU_INLINE void q_step_block(const uint8_t* in_rec, const void* x, size_t base, size_t cnt,
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
  int32_t lo = 0x7fffffff, hi = -0x7fffffff - 1;
  uint32_t nonfinite = 0;
  for (size_t j = 0; j < cnt; ++j) {
    const uint32_t u = f2u(v[j]);
    const int32_t key = q_order_key(u);
    lo = key < lo ? key : lo;
    hi = key > hi ? key : hi;
    nonfinite |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
  }
  const QRange r{u2f(uint32_t(q_order_key(uint32_t(lo)))), u2f(uint32_t(q_order_key(uint32_t(hi)))),
                 nonfinite};
  const QScale s = q_scale<BITS>(r);
  int32_t code[kBlock];
  // A 32-bit index: the hash's j * constant then steps as a vector add, not 64-bit lanes.
  const uint32_t m = uint32_t(cnt);
  for (uint32_t j = 0; j < m; ++j)
    code[j] = q_code<BITS>(v[j], j, k32, s);
  for (uint32_t j = m; j < kBlock; ++j)
    code[j] = 0;
  q_store_codes<BITS>(code, kQLanes, out_rec + 8);
  memcpy(out_rec, &s.mn, 4);
  memcpy(out_rec + 4, &s.sc, 4);
}

}  // namespace sketchccl::kernels::detail
