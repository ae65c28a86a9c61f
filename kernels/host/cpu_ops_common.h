// What every CPU path's block kernels and the drivers of kernels/host/codec_paths.inc share: the
// stream's jumps, a slice's CASQ levels, a block's CASQ codes and a packet's CASQ parts, and the
// scalar constants of the routines the vector paths (cpu_ops_avx2.h, cpu_ops_avx512.h) broadcast.
// Every path computes the same IEEE operations in the same order as the SCCL_HD routines of
// q_block.h / codec_impl.h, so every path writes the same bytes as the others and as the CUDA
// build (tests/unit/kernels/codec_paths_test.cc runs each path the CPU has against the generic
// one).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/casq_fit.h"

namespace sketchccl::kernels::detail {

// ---- the scalar routines' constants, as the vector paths broadcast them -----------------------
// mix32's multipliers, stream_seed's lane step, stream_next's multiplier and increment
// (codec_common.h).
inline constexpr uint32_t kMix32MulA = 0x7feb352du;
inline constexpr uint32_t kMix32MulB = 0x846ca68bu;
inline constexpr uint32_t kStreamLaneMul = 0x9e3779b9u;
inline constexpr uint32_t kStreamMul = 747796405u;
inline constexpr uint32_t kStreamInc = 2891336453u;
// canon_nan's quiet NaN, and the bias of float_to_bf16's round to nearest even.
inline constexpr uint32_t kQuietNanBits = 0x7fc00000u;
inline constexpr uint32_t kBf16RoundBias = 0x7fffu;
// casq_thresholds' and casq_code's: a level past K (+Inf), the smallest gap given an inverse
// (2^-97), the clamp of a position between two levels (2^30, as bits) and the draw of a nearest
// rounding (one half).
inline constexpr uint32_t kInfBits = 0x7f800000u;
inline constexpr uint32_t kCasqMinGapBits = 0x0f000000u;
inline constexpr uint32_t kCasqPosMaxBits = 0x4e800000u;
inline constexpr uint32_t kNearestDraw = 0x80000000u;
static_assert(kCasqPosMaxBits == 0x3f800000u + (kCasqShift << 23), "the clamp is 2^kCasqShift");

// q_block_codes' factor from a value's offset to its code in fixed point (kQShift<BITS> bits).
template <uint32_t BITS>
SCCL_CPU_INLINE float q_code_mult(const QScale& s) {
  return s.inv * float(1u << kQShift<BITS>);
}

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
    a = a * kStreamMul;
    c = c * kStreamMul + kStreamInc;
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

}  // namespace sketchccl::kernels::detail
