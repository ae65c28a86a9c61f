// Building blocks shared by every codec, written once for the CPU build (g++/clang++) and for
// CUDA (nvcc): SCCL_HD marks functions __host__ __device__ under nvcc and is empty otherwise.
// Nothing here allocates, touches global state or includes anything above core/.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "kernels/codec.h"

#if defined(__CUDACC__)
#define SCCL_HD __host__ __device__
#define SCCL_HD_INLINE __host__ __device__ __forceinline__
#else
#define SCCL_HD
#define SCCL_HD_INLINE inline
#endif
// The CPU drivers' per-block routines: always inlined into their loops, so that whole blocks
// get constant trip counts and each clone of a driver (codec_host.cc) its own vector code.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define SCCL_CPU_INLINE inline __attribute__((always_inline))
#else
#define SCCL_CPU_INLINE inline
#endif
// The element conversions and bit casts, tiny and called inside every vector loop: always
// inlined, so that no clone of a CPU loop calls an out-of-line baseline copy.
#if defined(__GNUC__) && !defined(__CUDACC__)
#define SCCL_HD_TINY inline __attribute__((always_inline))
#else
#define SCCL_HD_TINY SCCL_HD_INLINE
#endif

namespace sketchccl::kernels::detail {

// ---- packet header ------------------------------------------------------------------------------
// Every packet starts with this 32-byte header (little-endian, as every supported host is).
constexpr uint32_t kMagic = 0x4B434353u;    // "SCCK" in memory order
constexpr uint8_t kVersion = 3;             // 3: CASQ with bf16 scales per 64 (docs/codecs.md)
constexpr size_t kBlock = 256;              // quantizer block and non-finite mask granularity
constexpr uint64_t kMaxElems = 1ull << 40;  // larger slices are rejected as invalid arguments
constexpr uint32_t kMaxS2Rows = 8;
constexpr uint32_t kMaxS2Counters = 1u << 30;
constexpr uint32_t kCasqSample = 4096;  // values sampled to fit the CASQ clusters
constexpr int kCasqLloydIters = 6;      // a fit from k-means++ seeds (encode)
constexpr int kCasqWarmIters = 2;       // a fit from the incoming packet's levels (step)
constexpr size_t kCasqSub = 64;         // elements per CASQ scale (a quarter of a block)
constexpr uint32_t kCasqSubs = uint32_t(kBlock / kCasqSub);

struct PacketHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t codec;  // CodecId
  uint8_t bits;   // q*: bits per code; casq*: bits per code; else 0
  uint8_t rows;   // s2: sketch rows; else 0
  uint64_t n;     // element count
  uint32_t p0;    // s2: counters per row; casq: total buckets; q*: block size; else 0
  uint32_t p1;    // casq: clusters (2^bits); else 0
  uint64_t salt;  // s2: hash salt of (seed, call, offset_key); casq: of those and the step
};
static_assert(sizeof(PacketHeader) == 32, "header layout");

SCCL_HD_INLINE size_t round8(size_t b) {
  return (b + 7) & ~size_t(7);
}
SCCL_HD_INLINE size_t div_up(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// ---- counter-based randomness
// --------------------------------------------------------------------
SCCL_HD_INLINE uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// 32-bit avalanche hash (lowbias32), cheap enough to run per element and vectorizable.
SCCL_HD_TINY uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// Key of one (seed, call, offset_key, step) stream.
SCCL_HD_INLINE uint64_t stream_key(uint64_t seed, uint64_t call, uint32_t offset_key,
                                   uint32_t step) {
  return mix64(mix64(mix64(seed ^ 0x5343434c52474e31ull) ^ call) ^
               ((uint64_t(offset_key) << 32) | step));
}
// s2 hashes must be identical at every step of the ring: no step in the salt.
SCCL_HD_INLINE uint64_t s2_salt(uint64_t seed, uint64_t call, uint32_t offset_key) {
  return mix64(stream_key(seed, call, offset_key, 0xffffffffu) ^ 0x5332u);
}
// The shared random stream of stochastic rounding: 32 uniform bits for element j (0 to 255) of
// a 256-element block whose key is k32. The block is 16 lanes of 16 draws: lane j % 16 starts
// at a hash of the key and the lane (stream_seed), and each next draw is one step of a 32-bit
// congruential generator (stream_next; its top bits are the ones used). Each draw is uniform on
// its own (the hash's output is, and each step is a bijection); the CPU steps 16 lanes at once,
// one multiply and one add per 16 elements, and the GPU computes any draw directly (rand32).
constexpr uint32_t kStreamLanes = 16;
SCCL_HD_TINY uint32_t stream_seed(uint32_t k32, uint32_t lane) {
  return mix32(k32 ^ (lane * 0x9e3779b9u));
}
SCCL_HD_TINY uint32_t stream_next(uint32_t x) {
  return x * 747796405u + 2891336453u;
}
SCCL_HD_INLINE uint32_t rand32(uint32_t k32, uint32_t j) {
  uint32_t x = stream_seed(k32, j % kStreamLanes);
  for (uint32_t i = j / kStreamLanes; i > 0; --i)
    x = stream_next(x);
  return x;
}
// Stochastic rounding in fixed point, shared by q* and CASQ: t holds a value times 2^S (t + 2^S
// < 2^32); adding the top S bits of the uniform draw r and dropping the S fraction bits gives
// floor(t / 2^S), plus one with probability frac(t / 2^S) to within 2^-S: E[result] = t / 2^S.
template <uint32_t S>
SCCL_HD_TINY uint32_t sr_up(uint32_t t, uint32_t r) {
  return (t + (r >> (32 - S))) >> S;
}
// Lemire's range reduction: uniform 32-bit h -> [0, m).
SCCL_HD_INLINE uint32_t fastrange(uint32_t h, uint32_t m) {
  return uint32_t((uint64_t(h) * m) >> 32);
}

// ---- float formats
// -------------------------------------------------------------------------------
SCCL_HD_TINY uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
SCCL_HD_TINY float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
SCCL_HD_TINY bool is_finite(float f) {
  return (f2u(f) & 0x7f800000u) != 0x7f800000u;
}
SCCL_HD_TINY float qnan() {
  return u2f(0x7fc00000u);
}
// Any NaN as qnan(). Arithmetic producing NaN gives 0x7fffffff on the GPU, but keeps a NaN
// input's sign and payload (or gives 0xffc00000) on x86. Packets therefore hold only qnan():
// encode and step pass their values through this, and q*/CASQ/s2 store the constant. Decoding
// on x86 then needs no fix-up (qnan() times a finite scale stays qnan()); the GPU's decode
// kernels apply it to every output.
SCCL_HD_TINY float canon_nan(float v) {
  // Branch-free (a mask, not a select), so that the CPU build's loops still vectorize.
  const uint32_t u = f2u(v);
  const uint32_t nan = 0u - uint32_t((u & 0x7fffffffu) > 0x7f800000u);
  return u2f((u & ~nan) | (0x7fc00000u & nan));
}

// The conversions compute every case and select (no branches), so that the CPU build's loops
// over them vectorize; tests/unit/kernels/codec_golden_test.cc checks them against the
// branching versions they replaced, bit for bit.
SCCL_HD_TINY float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  const uint32_t normal = sign | ((exp + 112u) << 23) | (man << 13);
  const uint32_t infnan = sign | 0x7f800000u | (man << 13);
  // Zero and subnormals: man * 2^-24, exact in a float.
  const uint32_t sub = sign | f2u(float(int32_t(man)) * (1.0f / 16777216.0f));
  const uint32_t r = exp == 0x1fu ? infnan : normal;
  return u2f(exp == 0 ? sub : r);
}
// Round to nearest even; overflow gives Inf, NaN gives the quiet NaN 0x7e00 (with the sign).
SCCL_HD_TINY uint16_t float_to_half(float f) {
  const uint32_t x = f2u(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal halves: round to nearest even at bit 13, then rebias.
  const uint32_t normal = ((ax + 0xfffu + ((ax >> 13) & 1u)) >> 13) - (112u << 10);
  // Below the smallest normal half (2^-14): adding 0.5 rounds |f| to a multiple of 2^-24 (the
  // half's subnormal step) to nearest even in the FPU, leaving that multiple in the low bits.
  const uint32_t sub = f2u(u2f(ax) + 0.5f) - 0x3f000000u;
  const uint32_t big = ax > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN; Inf or >= 65520
  uint32_t r = ax < 0x38800000u ? sub : normal;
  r = ax >= 0x477ff000u ? big : r;
  return uint16_t(sign | r);
}
SCCL_HD_TINY float bf16_to_float(uint16_t b) {
  return u2f(uint32_t(b) << 16);
}
SCCL_HD_TINY uint16_t float_to_bf16(float f) {
  const uint32_t x = f2u(f);
  const uint32_t nan = (x >> 16) | 0x40u;  // quiet NaN
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return uint16_t((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Calls f(std::integral_constant<int, ET>()) with the element type as a compile-time value, so
// one template body serves every type; false (and no call) for an unknown type.
template <typename F>
inline bool for_elem_type(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32:
      f(std::integral_constant<int, int(ElemType::kF32)>());
      return true;
    case ElemType::kF16:
      f(std::integral_constant<int, int(ElemType::kF16)>());
      return true;
    case ElemType::kBf16:
      f(std::integral_constant<int, int(ElemType::kBf16)>());
      return true;
  }
  return false;
}

// Typed element access; ET is an ElemType value.
template <int ET>
SCCL_HD_TINY float load_elem(const void* x, size_t i) {
  if constexpr (ET == int(ElemType::kF32)) {
    return static_cast<const float*>(x)[i];
  } else if constexpr (ET == int(ElemType::kF16)) {
    return half_to_float(static_cast<const uint16_t*>(x)[i]);
  } else {
    return bf16_to_float(static_cast<const uint16_t*>(x)[i]);
  }
}
template <int ET>
SCCL_HD_TINY void store_elem(void* y, size_t i, float v) {
  if constexpr (ET == int(ElemType::kF32)) {
    static_cast<float*>(y)[i] = v;
  } else if constexpr (ET == int(ElemType::kF16)) {
    static_cast<uint16_t*>(y)[i] = float_to_half(v);
  } else {
    static_cast<uint16_t*>(y)[i] = float_to_bf16(v);
  }
}

// ---- bitmaps
// -------------------------------------------------------------------------------------
SCCL_HD_INLINE size_t bitmap_words(size_t n) {
  return div_up(n, 64);
}
SCCL_HD_INLINE bool bit_get(const uint64_t* bm, size_t i) {
  return (bm[i >> 6] >> (i & 63)) & 1u;
}

}  // namespace sketchccl::kernels::detail
