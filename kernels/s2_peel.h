// s2's decode, written once for both builds: peeling in rounds over exact fixed-point residuals.
//
// The residuals are 128-bit two's-complement fixed point, so subtracting resolved values is
// integer addition: exact, and the same whatever order the subtractions run in (the CUDA build
// adds with atomics in thread order; the CPU build in a loop). A round resolves, for every
// position held alone by some counter ("pure"), its value from the pure counter of lowest id,
// then subtracts it from the position's counters. Which counter resolves a position and every
// value read depend only on the state at the round's start, so both builds decode the same
// bits. The per-item routines take an `Ops` policy for the shared updates: S2HostOps (plain) or
// the CUDA build's atomics (kernels/cuda/s2_kernels.cuh). docs/codecs.md has the details.
#pragma once

#include <math.h>

#include "kernels/codec_impl.h"

namespace sketchccl::kernels::detail {

// Rounds of peeling, in both builds: positions still unresolved after them get the median of
// their rows' estimates. The CUDA build enqueues all of them (rounds after the last with a pure
// counter return at once), so the host never waits for the device during a decode.
constexpr int kS2PeelRounds = 64;
// A counter's largest value maps below 2^(kS2FixTop + 1): 26 bits of headroom for residuals that
// grow as values leave their counters, and values down to 2^-47 of the largest counter exact.
constexpr int kS2FixTop = 100;

// 128-bit two's complement.
struct S2Fix {
  uint64_t lo, hi;
};
SCCL_HD_INLINE S2Fix s2_fix_neg(S2Fix a) {
  S2Fix r;
  r.lo = ~a.lo + 1u;
  r.hi = ~a.hi + (r.lo == 0 ? 1u : 0u);
  return r;
}
SCCL_HD_INLINE S2Fix s2_fix_add(S2Fix a, S2Fix b) {
  S2Fix r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
  return r;
}
SCCL_HD_INLINE bool s2_fix_is_neg(S2Fix a) {
  return (a.hi >> 63) != 0;
}

// Biased exponent of a finite double (0 for zero and subnormals, -1 for Inf / NaN): the scale
// of the fixed point is the largest over the sketch's counters (a max, so order-free).
SCCL_HD_INLINE int s2_exponent(double c) {
  uint64_t u;
  memcpy(&u, &c, 8);
  const int be = int((u >> 52) & 0x7ffu);
  return be == 0x7ff ? -1 : be;
}

// c as fixed point for the scale emax (the largest s2_exponent): counters of exponent emax map
// below 2^(kS2FixTop + 1); a counter under 2^-48 of the largest loses low bits (truncated
// toward zero).
// Non-finite counters (a corrupt packet) count as 0.
SCCL_HD_INLINE S2Fix s2_to_fix(double c, int emax) {
  uint64_t u;
  memcpy(&u, &c, 8);
  const int be = int((u >> 52) & 0x7ffu);
  S2Fix r{0, 0};
  if (be == 0x7ff) return r;
  const uint64_t m = (u & ((1ull << 52) - 1)) | (be != 0 ? (1ull << 52) : 0u);
  // value = m * 2^(max(be,1) - 1075); fixed = m * 2^(max(be,1) - emax + kS2FixTop - 52).
  const int sh = (be != 0 ? be : 1) - (emax > 1 ? emax : 1) + kS2FixTop - 52;
  if (sh >= 128 || sh <= -53) {
    return r;  // sh >= 128 cannot happen (be <= emax); far below the scale: 0
  } else if (sh >= 64) {
    r.hi = m << (sh - 64);
  } else if (sh > 0) {
    r.lo = m << sh;
    r.hi = m >> (64 - sh);
  } else {
    r.lo = m >> -sh;
  }
  return (u >> 63) ? s2_fix_neg(r) : r;
}

// The fixed point's unit 2^(max(emax, 1) - 1075 + 52 - kS2FixTop) as two factors, each a
// double (the unit itself may lie below the double range): the first keeps any residual of at
// least 1 unit normal, so the product rounds once, like ldexp.
struct S2Unit {
  double a, b;
};
SCCL_HD_INLINE S2Unit s2_unit(int emax) {
  const int k = (emax > 1 ? emax : 1) - 1075 + 52 - kS2FixTop;
  const int ka = k < -900 ? -900 : k;
  return S2Unit{ldexp(1.0, ka), ldexp(1.0, k - ka)};
}
// The double nearest (in two roundings, the same in both builds) to a fixed-point value.
SCCL_HD_INLINE double s2_from_fix(S2Fix a, S2Unit u) {
  const bool neg = s2_fix_is_neg(a);
  const S2Fix m = neg ? s2_fix_neg(a) : a;
  const double mag = double(m.hi) * 18446744073709551616.0 + double(m.lo);
  const double v = mag * u.a * u.b;
  return neg ? -v : v;
}
SCCL_HD_INLINE double s2_from_fix(S2Fix a, int emax) {
  return s2_from_fix(a, s2_unit(emax));
}

// The decode's state. Per counter (rows * counters): residual, unresolved slots, their XOR. Per
// slot: claim (lowest pure counter naming it this round, ~0 when none), state (kS2*), resolved
// value. A slot is a position: the GPU has one per element (slot_pos null: slot k is position
// k), the CPU one per support position (slot_pos[k]), so its arrays stay small.
enum : uint8_t { kS2Open = 0, kS2Absent = 2, kS2Peeled = 3 };
struct S2Peel {
  const uint64_t* bitmap;
  const uint64_t* slot_pos;  // null: the identity
  const uint32_t* slot_bk;   // null, or per slot and row: bucket | sign << 31 (a cache)
  S2Fix* res;
  uint32_t* cnt;
  uint64_t* xr;
  uint32_t* claim;
  uint8_t* state;
  S2Fix* val;
  uint64_t salt;
  uint32_t rows, counters;
  S2Unit unit;  // from the scale (emax): set before s2_position_value
};
SCCL_HD_INLINE size_t s2_pos(const S2Peel& s, size_t k) {
  return s.slot_pos != nullptr ? size_t(s.slot_pos[k]) : k;
}
// Counter id of slot k (position i) in row r, and its sign: s2_bucket, or its cached value.
SCCL_HD_INLINE size_t s2_counter(const S2Peel& s, uint32_t r, size_t k, size_t i, bool* neg) {
  if (s.slot_bk != nullptr) {
    const uint32_t e = s.slot_bk[k * s.rows + r];
    *neg = (e >> 31) != 0;
    return size_t(r) * s.counters + (e & 0x7fffffffu);
  }
  return size_t(r) * s.counters + s2_bucket(s.salt, r, i, s.counters, neg);
}

// Plain updates (one thread; the CPU build).
struct S2HostOps {
  SCCL_HD_INLINE void add_u32(uint32_t* p, uint32_t v) const { *p += v; }
  SCCL_HD_INLINE void xor_u64(uint64_t* p, uint64_t v) const { *p ^= v; }
  SCCL_HD_INLINE void min_u32(uint32_t* p, uint32_t v) const { *p = v < *p ? v : *p; }
  SCCL_HD_INLINE void add_fix(S2Fix* p, S2Fix v) const { *p = s2_fix_add(*p, v); }
};

// Slot k: in the support or not; its counters count it (cnt, xr zeroed before, claim[k] ~0).
// True when it is in the support.
template <typename Ops>
SCCL_HD_INLINE bool s2_init_position(const Ops& ops, const S2Peel& s, size_t k) {
  const size_t i = s2_pos(s, k);
  if (!bit_get(s.bitmap, i)) {
    s.state[k] = kS2Absent;
    return false;
  }
  s.state[k] = kS2Open;
  for (uint32_t r = 0; r < s.rows; ++r) {
    bool neg;
    const size_t id = s2_counter(s, r, k, i, &neg);
    ops.add_u32(s.cnt + id, 1u);
    ops.xor_u64(s.xr + id, uint64_t(k));
  }
  return true;
}

// Round, part 1: a pure counter claims its slot. True when the counter is pure.
template <typename Ops>
SCCL_HD_INLINE bool s2_claim(const Ops& ops, const S2Peel& s, size_t id) {
  if (s.cnt[id] != 1) return false;
  ops.min_u32(s.claim + s.xr[id], uint32_t(id));
  return true;
}

// Round, part 2: the winning counter resolves its slot from its residual and subtracts the
// value from the position's counters (its own included, which leaves it at zero). Another
// winner never touches this counter in the same round (it holds only this slot), so the value
// read is the round's start value whatever the order. True when it resolved.
template <typename Ops>
SCCL_HD_INLINE bool s2_resolve(const Ops& ops, const S2Peel& s, size_t id) {
  if (s.cnt[id] != 1) return false;
  const size_t k = size_t(s.xr[id]);
  if (s.claim[k] != uint32_t(id)) return false;
  s.claim[k] = 0xffffffffu;
  const size_t i = s2_pos(s, k);
  bool neg;
  s2_counter(s, uint32_t(id / s.counters), k, i, &neg);
  const S2Fix v = neg ? s2_fix_neg(s.res[id]) : s.res[id];
  s.val[k] = v;
  s.state[k] = kS2Peeled;
  const S2Fix mv = s2_fix_neg(v);
  for (uint32_t r = 0; r < s.rows; ++r) {
    bool n2;
    const size_t id2 = s2_counter(s, r, k, i, &n2);
    ops.add_fix(s.res + id2, n2 ? v : mv);  // the counter holds -v when its sign is negative
    ops.add_u32(s.cnt + id2, 0xffffffffu);
    ops.xor_u64(s.xr + id2, uint64_t(k));
  }
  return true;
}

// Slot k's value (before scaling): the resolved value, the median of its rows' estimates, or 0
// outside the support.
SCCL_HD_INLINE float s2_position_value(const S2Peel& s, size_t k) {
  const uint8_t st = s.state[k];
  if (st == kS2Peeled) return float(s2_from_fix(s.val[k], s.unit));
  if (st != kS2Open) return 0.0f;
  const size_t i = s2_pos(s, k);
  double est[kMaxS2Rows];
  for (uint32_t r = 0; r < s.rows; ++r) {
    bool neg;
    const double cv = s2_from_fix(s.res[s2_counter(s, r, k, i, &neg)], s.unit);
    const double e = neg ? -cv : cv;
    uint32_t j = r;
    while (j > 0 && est[j - 1] > e) {
      est[j] = est[j - 1];
      --j;
    }
    est[j] = e;
  }
  const uint32_t r = s.rows;
  return float(r & 1 ? est[r / 2] : 0.5 * (est[r / 2 - 1] + est[r / 2]));
}

// Slot k stays unresolved: left to the median estimate, in a block that decodes as a value (a
// non-finite block decodes as NaN whatever its positions hold, so it needs no repair).
SCCL_HD_INLINE bool s2_unresolved(const S2Peel& s, const uint64_t* nf, size_t k) {
  return s.state[k] == kS2Open && !bit_get(nf, s2_pos(s, k) / kBlock);
}

// Slot k's output element: scaled, NaN in a block the packet marks non-finite.
SCCL_HD_INLINE float s2_output(const S2Peel& s, const uint64_t* nf, size_t k, float scale) {
  return bit_get(nf, s2_pos(s, k) / kBlock) ? qnan() : canon_nan(s2_position_value(s, k) * scale);
}

}  // namespace sketchccl::kernels::detail
