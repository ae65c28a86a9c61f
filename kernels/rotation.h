// The randomized Hadamard transform of q8r/q4r/q2r (docs/codecs.md): each quantizer block of 256
// is multiplied by random signs, then by the 256-point Walsh–Hadamard matrix, scaled by 1/16 =
// 1/sqrt(256) (exact: the transform is orthonormal and its own inverse up to the signs). The
// signs come from the call's agreed (seed, call, offset key) and the block, never the step, so
// every rank and every ring step rotates a block alike and rotated packets add like the values.
// The butterflies run in one fixed order (stages h = 1, 2, 4 inside a group of 8, then h = 8 ..
// 128 across groups) and are only additions, subtractions and exact scalings: the CPU's loops and
// a CUDA warp (one group per lane, the cross-group stages by shuffles) write the same bits.
#pragma once

#include "kernels/codec_common.h"

namespace sketchccl::kernels::detail {

constexpr float kRotScale = 0.0625f;  // 1 / sqrt(kBlock)
static_assert(kBlock == 256, "the orthonormal scale 1/16 is exact for a block of 256");

// Key of a call's signs at a slice: no step, unlike stochastic rounding's stream.
SCCL_HD_INLINE uint64_t rot_key(uint64_t seed, uint64_t call, uint32_t offset_key) {
  return mix64(stream_key(seed, call, offset_key, 0xfffffffeu) ^ 0x524f54ull);
}
// Key of block blk's signs.
SCCL_HD_INLINE uint64_t rot_block_key(uint64_t key, size_t blk) {
  return mix64(key ^ (uint64_t(blk) * 0xd1b54a32d192ed03ull));
}
// Signs of group g (elements 8g .. 8g + 7) of a block: bit k set means element 8g + k is negated.
SCCL_HD_INLINE uint32_t rot_group_signs(uint64_t bkey, uint32_t g) {
  return uint32_t(mix64(bkey + (g >> 2)) >> (8 * (g & 3u))) & 0xffu;
}
// The forward multiplier of a sign bit: +-1/16 (the sign and the scale in one exact product).
SCCL_HD_INLINE float rot_mult(uint32_t negate) {
  return u2f(f2u(kRotScale) | (negate << 31));
}
// The inverse's last factor: the sign put back.
SCCL_HD_INLINE float rot_unsign(float v, uint32_t negate) {
  return negate != 0 ? -v : v;
}

// Stages h = 1, 2, 4 of the transform inside one group of 8.
SCCL_HD_INLINE void fwht_group(float v[8]) {
  for (uint32_t h = 1; h < kGroup; h <<= 1) {
    for (uint32_t i = 0; i < kGroup; ++i) {
      if ((i & h) != 0) continue;
      const float a = v[i], b = v[i + h];
      v[i] = a + b;
      v[i + h] = a - b;
    }
  }
}
// One butterfly of a cross-group stage seen from one side: the pair is (a, b) = (lower, upper)
// and becomes (a + b, a - b); `own` is this side's value, `other` the partner's.
SCCL_HD_INLINE float fwht_pair(float own, float other, bool upper) {
  return upper ? other - own : own + other;
}

// ---- the CPU's whole block (a CUDA warp runs the group routines above, a group per lane) ------

// The 256 forward multipliers of block key bkey.
SCCL_CPU_INLINE void rot_mults(uint64_t bkey, float* m) {
  for (uint32_t g = 0; g < kBlock / kGroup; ++g) {
    const uint32_t s = rot_group_signs(bkey, g);
    for (uint32_t k = 0; k < kGroup; ++k)
      m[g * kGroup + k] = rot_mult((s >> k) & 1u);
  }
}
// The transform of v[0 .. 256) in place, without signs or scale.
SCCL_CPU_INLINE void fwht_block(float* v) {
  for (uint32_t g = 0; g < kBlock; g += kGroup)
    fwht_group(v + g);
  for (uint32_t h = kGroup; h < kBlock; h <<= 1) {
    for (uint32_t i = 0; i < kBlock; i += 2 * h) {
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}
// y = H (m * x) with the block's multipliers m (rot_mults): the forward rotation.
SCCL_CPU_INLINE void rot_forward(const float* x, const float* m, float* y) {
  for (uint32_t j = 0; j < kBlock; ++j)
    y[j] = x[j] * m[j];
  fwht_block(y);
}
// v = sign * H (v / 16) in place: the inverse of rot_forward (m's signs, as +-1/16).
SCCL_CPU_INLINE void rot_inverse(float* v, const float* m) {
  for (uint32_t j = 0; j < kBlock; ++j)
    v[j] = v[j] * kRotScale;
  fwht_block(v);
  for (uint32_t j = 0; j < kBlock; ++j)
    v[j] = rot_unsign(v[j], uint32_t(m[j] < 0.0f));
}

}  // namespace sketchccl::kernels::detail
