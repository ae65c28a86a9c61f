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
  const float d = mx - s.mn;
  // (max - min) / L correctly rounded, so (v - min) * inv stays within a few ulps of [0, L]; the
  // ends apart when the difference overflows (never for finite ends).
  s.sc = is_finite(d) ? d / L : mx / L - s.mn / L;
  if (r.nonfinite) {
    s.mn = qnan();
    s.sc = qnan();
  }
  s.inv = (!r.nonfinite && s.sc > 0.0f) ? 1.0f / s.sc : 0.0f;
  return s;
}

// Fraction bits of q*'s fixed-point rounding: u * 2^S <= L * 2^S < 2^31 (an exact scaling).
template <uint32_t BITS>
constexpr uint32_t kQShift = 31 - BITS;
// The bits of float(L) and of float(L * 2^S): clamps of non-negative floats as integers.
template <uint32_t BITS>
SCCL_HD_TINY int32_t q_top_bits() {
  return int32_t(f2u(float((1u << BITS) - 1u)));
}
template <uint32_t BITS>
SCCL_HD_TINY int32_t q_top_bits_fixed() {
  return int32_t(f2u(float(((1u << BITS) - 1u) << kQShift<BITS>)));
}

// Code of value v whose draw from the shared stream is r (rand32). Stochastic rounding:
// u = (v - min) / scale clamped to [0, L] (NaN and -0 to +0), times 2^S, truncated, then sr_up:
// floor(u) + 1 with probability frac(u), so E[min + code * scale] = v (to 2^-S of a scale).
template <uint32_t BITS>
SCCL_HD_INLINE uint32_t q_code(float v, uint32_t r, const QScale& s) {
  constexpr uint32_t S = kQShift<BITS>;
  const float t = (v - s.mn) * s.inv;
  // The clamp on the bits (a mask, a signed max, a signed min: three vector operations on the
  // CPU, where float selects cost several): NaN is masked to 0, negatives (sign bit set) are
  // below 0 as int32, and non-negative floats order as their bits.
  int32_t b = int32_t(f2u(t) & (0u - uint32_t(t == t)));
  b = b > 0 ? b : 0;
  b = b < q_top_bits<BITS>() ? b : q_top_bits<BITS>();
  return sr_up<S>(uint32_t(int32_t(u2f(uint32_t(b)) * float(1u << S))), r);
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
    code[k] = k < cnt ? int32_t(q_code<BITS>(v[k], rand32(k32, j0 + k), s)) : 0;
}
SCCL_HD_INLINE void q_record_scale(const uint8_t* rec, float* mn, float* sc) {
  memcpy(mn, rec, 4);
  memcpy(sc, rec + 4, 4);
}

// A lane's input: elements [base + 8 lane, +cnt) of x, plus the incoming record's values when
// in_rec is given (the fused step).
// The incoming record's values of lane `lane` added to v (its first cnt; 0 past them).
template <uint32_t BITS>
SCCL_HD_INLINE void q_lane_add_record(const uint8_t* in_rec, uint32_t lane, uint32_t cnt,
                                      float v[8]) {
  float mn, sc, a[kGroup];
  q_record_scale(in_rec, &mn, &sc);
  q_load_values<BITS>(in_rec + 8 + lane * BITS, kGroup, mn, sc, a);
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = k < cnt ? a[k] + v[k] : 0.0f;
}
template <uint32_t BITS, int ET>
SCCL_HD_INLINE void q_lane_load(const uint8_t* in_rec, const void* x, size_t base, uint32_t lane,
                                uint32_t cnt, float v[8]) {
  load8<ET>(x, base + size_t(lane) * kGroup, cnt, v);
  if (in_rec != nullptr) q_lane_add_record<BITS>(in_rec, lane, cnt, v);
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

// ---- the CPU's driver (the CUDA build runs the lane routines above, one lane per thread) ------

// The stream's 256 draws of a block (rand32 for every j): the 16 seeds, then each draw one step
// after the one 16 before it (a dependence distance of 16: 16 lanes a vector step).
SCCL_CPU_INLINE void stream_block(uint32_t k32, uint32_t* r) {
  for (uint32_t l = 0; l < kStreamLanes; ++l)
    r[l] = stream_seed(k32, l);
  for (uint32_t j = kStreamLanes; j < kBlock; ++j)
    r[j] = stream_next(r[j - kStreamLanes]);
}

// A block's codes as one byte each, c[0 .. 256), and back: the packing of q_store_codes done on
// whole words (code k of a byte at bit k * BITS; 3 bits: the 8 codes of a group, a word of 8
// bytes, to and from 24 bits by halving shifts), flat loops the compiler vectorizes.
template <uint32_t BITS>
SCCL_CPU_INLINE void q_codes_unpack(const uint8_t* codes, uint8_t* c) {
  if constexpr (BITS == 8) {
    memcpy(c, codes, kBlock);
  } else if constexpr (BITS == 4) {
    for (uint32_t b = 0; b < kBlock / 2; ++b) {
      const uint16_t w = uint16_t((codes[b] | (codes[b] << 4)) & 0x0f0f);
      memcpy(c + 2 * b, &w, 2);
    }
  } else if constexpr (BITS == 3) {
    for (uint32_t g = 0; g < kQLanes; ++g) {
      uint64_t w = load_le<3>(codes + 3 * g);
      w = (w | (w << 20)) & 0x00000fff00000fffull;
      w = (w | (w << 10)) & 0x003f003f003f003full;
      w = (w | (w << 5)) & 0x0707070707070707ull;
      memcpy(c + 8 * g, &w, 8);
    }
  } else {
    static_assert(BITS == 2, "codes are 8, 4, 3 or 2 bits");
    for (uint32_t b = 0; b < kBlock / 4; ++b) {
      const uint32_t y = codes[b];
      const uint32_t w = (y | (y << 6) | (y << 12) | (y << 18)) & 0x03030303u;
      memcpy(c + 4 * b, &w, 4);
    }
  }
}
template <uint32_t BITS>
SCCL_CPU_INLINE void q_codes_pack(const uint8_t* c, uint8_t* codes) {
  if constexpr (BITS == 8) {
    memcpy(codes, c, kBlock);
  } else if constexpr (BITS == 4) {
    for (uint32_t b = 0; b < kBlock / 2; ++b) {
      uint16_t w;
      memcpy(&w, c + 2 * b, 2);
      codes[b] = uint8_t(w | (w >> 4));
    }
  } else if constexpr (BITS == 3) {
    for (uint32_t g = 0; g < kQLanes; ++g) {
      uint64_t w;
      memcpy(&w, c + 8 * g, 8);
      w = (w | (w >> 5)) & 0x003f003f003f003full;
      w = (w | (w >> 10)) & 0x00000fff00000fffull;
      w = (w | (w >> 20)) & 0xffffffull;
      store_le<3>(codes + 3 * g, w);
    }
  } else {
    for (uint32_t b = 0; b < kBlock / 4; ++b) {
      uint32_t w;
      memcpy(&w, c + 4 * b, 4);
      codes[b] = uint8_t(w | (w >> 6) | (w >> 12) | (w >> 18));
    }
  }
}

// Codes of a block's values v[0 .. 256) into c, the stream's 16 lanes stepped together.
// kFast (a finite block whose max - min is finite, a normal scale and inv * 2^S finite): then
// v >= min, so t = (v - min) * (inv * 2^S) is q_code's ((v - min) * inv) * 2^S exactly (a
// power-of-two scaling commutes with rounding) with no NaN to clear, t < 2^31 (within 2^-22 of
// L * 2^S, by the scale's rounding), and clamping the code at L equals clamping t first.
template <uint32_t BITS, bool kFast>
SCCL_CPU_INLINE void q_block_codes(const float* v, uint32_t k32, const QScale& s, uint8_t* c) {
  constexpr uint32_t S = kQShift<BITS>;
  constexpr uint32_t L = (1u << BITS) - 1u;
  const float inv_s = s.inv * float(1u << S);
  uint32_t r[kBlock];
  stream_block(k32, r);
  for (uint32_t j = 0; j < kBlock; ++j) {
    uint32_t code;
    if constexpr (kFast) {
      code = sr_up<S>(uint32_t(int32_t((v[j] - s.mn) * inv_s)), r[j]);
      code = code < L ? code : L;
    } else {
      code = q_code<BITS>(v[j], r[j], s);
    }
    c[j] = uint8_t(code);
  }
}

// The range of a block from three integer reductions of its values' bits: the signed maximum
// (the largest non-negative float, if any), the unsigned maximum (with the sign bit set: the
// negative float of largest magnitude, the minimum) and the unsigned minimum (the other end when
// every value has the same sign). Exact, so the same min and max as the warp's float reduction
// (q_scale's + 0.0f makes -0 against +0 moot); any non-finite value lies above +Inf's bits as
// a signed maximum or at and above -Inf's as an unsigned one, and then min and scale are NaN.
struct QBits {
  int32_t smax = -0x7fffffff - 1;
  uint32_t umax = 0, umin = 0xffffffffu;
  SCCL_CPU_INLINE void add(uint32_t u) {
    smax = int32_t(u) > smax ? int32_t(u) : smax;
    umax = u > umax ? u : umax;
    umin = u < umin ? u : umin;
  }
  QRange range() const {
    const uint32_t hi = smax >= 0 ? uint32_t(smax) : umin;
    const uint32_t lo = (umax >> 31) != 0 ? umax : umin;
    return QRange{u2f(lo), u2f(hi), smax >= 0x7f800000 || umax >= 0xff800000u};
  }
};

// Whether a finite block's codes may take q_block_codes' fast path (see there).
template <uint32_t BITS>
SCCL_CPU_INLINE bool q_fast_path(const QRange& r, const QScale& s) {
  return is_finite(r.hi - r.lo) && s.sc >= u2f(0x00800000u) &&
         s.inv * float(1u << kQShift<BITS>) < u2f(0x7f800000u);
}

// One block of cnt elements (cnt <= 256) from base: encode (in_rec null) or the fused step,
// called with cnt = 256 as a constant for whole blocks so that every loop has a fixed trip count.
// Two flat passes over the block in L1: values (decoded record + x) and their range (QBits),
// then codes.
template <uint32_t BITS, int ET>
SCCL_CPU_INLINE void q_step_block(const uint8_t* in_rec, const void* x, size_t base, size_t cnt,
                                  uint32_t k32, uint8_t* out_rec) {
  float v[kBlock];
  uint8_t c[kBlock];
  QBits qb;
  if (in_rec != nullptr) {
    float mn, sc;
    q_record_scale(in_rec, &mn, &sc);
    const uint8_t* ic = in_rec + 8;  // q8: the record's bytes are the codes
    if constexpr (BITS != 8) {
      q_codes_unpack<BITS>(in_rec + 8, c);
      ic = c;
    }
    for (size_t j = 0; j < cnt; ++j) {
      v[j] = q_value(ic[j], mn, sc) + load_elem<ET>(x, base + j);
      qb.add(f2u(v[j]));
    }
  } else {
    for (size_t j = 0; j < cnt; ++j) {
      v[j] = load_elem<ET>(x, base + j);
      qb.add(f2u(v[j]));
    }
  }
  const QRange r = qb.range();
  const QScale s = q_scale<BITS>(r);
  for (size_t j = cnt; j < kBlock; ++j)
    v[j] = s.mn;  // padding: code 0 (overwritten below)
  if (r.nonfinite) {
    memset(c, 0, kBlock);  // q_code of any value with a NaN min and inv 0
  } else if (q_fast_path<BITS>(r, s)) {
    q_block_codes<BITS, true>(v, k32, s, c);
  } else {
    q_block_codes<BITS, false>(v, k32, s, c);
  }
  for (size_t j = cnt; j < kBlock; ++j)
    c[j] = 0;
  q_codes_pack<BITS>(c, out_rec + 8);
  memcpy(out_rec, &s.mn, 4);
  memcpy(out_rec + 4, &s.sc, 4);
}

// Values of one record (cnt <= 256) into v: the CPU's decode, by whole bytes of codes.
template <uint32_t BITS>
SCCL_CPU_INLINE void q_record_values(const uint8_t* rec, size_t cnt, float* v) {
  float mn, sc;
  q_record_scale(rec, &mn, &sc);
  uint8_t c[kBlock];
  q_codes_unpack<BITS>(rec + 8, c);
  for (size_t j = 0; j < cnt; ++j)
    v[j] = q_value(c[j], mn, sc);
}

}  // namespace sketchccl::kernels::detail
