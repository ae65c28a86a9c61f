// Pins the bytes of the casts', q*'s and CASQ's packets and decodes: any change of bits (a faster
// loop that rounds differently, another CPU's vector path) fails here, since other ranks and the
// CUDA build must keep agreeing with these bytes. The element conversions are checked against plain
// reference versions over a wide sample of all 32-bit (and every 16-bit) patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_common.h"
#include "kernels/q_block.h"

namespace sketchccl::kernels {
namespace {

uint64_t fnv1a(const void* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// Inputs from bit patterns (no library distributions, so the same on every platform): mostly
// values of mixed scales and signs, plus the special values every path must carry alike.
std::vector<float> golden_input(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    s = detail::mix64(s + i);
    const uint32_t r = uint32_t(s);
    // Exponents 2^-30 .. 2^17 (subnormal halves to fp16 overflow), both signs.
    const uint32_t exp = 97u + uint32_t((s >> 32) % 48u);
    v[i] = detail::u2f((r & 0x807fffffu) | (exp << 23));
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            detail::u2f(0x7f800000u),
                            detail::qnan(),
                            detail::u2f(0x00000001u),
                            65519.0f,
                            65520.0f,
                            -6.0e-8f,
                            detail::u2f(0x33000000u)};
  // Special values only in the tail blocks, so the leading blocks stay finite and quantized.
  for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]) && n > 600 + 37 * k; ++k)
    v[600 + 37 * k] = specials[k];
  return v;
}

std::vector<uint16_t> to_half_bits(const std::vector<float>& v, ElemType t) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = t == ElemType::kF16 ? detail::float_to_half(v[i]) : detail::float_to_bf16(v[i]);
  return h;
}

// Hash of encode, one step and the decode of the step's packet, for one codec and element type.
// The casts' hashes were recorded under packet format 1, whose layouts of the casts and q* are
// format 2's: the header's version byte is hashed as recorded and every other byte is pinned.
std::vector<uint64_t> version_as_recorded(std::vector<uint64_t> pkt) {
  reinterpret_cast<uint8_t*>(pkt.data())[4] = 1;
  return pkt;
}

uint64_t chain_hash(CodecId c, ElemType t, size_t n) {
  CodecParams p;
  p.codec = c;
  p.seed = 11;
  p.call = 3;
  p.offset_key = 5;
  std::vector<float> a = golden_input(n, 1), b = golden_input(n, 2);
  for (float& x : a)
    x *= 0.25f;  // keep the sums of the two inputs finite where they are
  std::vector<uint16_t> ah, bh;
  const void* xa = a.data();
  const void* xb = b.data();
  if (t != ElemType::kF32) {
    ah = to_half_bits(a, t);
    bh = to_half_bits(b, t);
    xa = ah.data();
    xb = bh.data();
  }
  const size_t bytes = packet_bytes(p, n);
  std::vector<uint64_t> pa(bytes / 8 + 1), pb(bytes / 8 + 1);
  EXPECT_TRUE(encode(p, xa, t, n, pa.data(), bytes).ok());
  uint64_t h = fnv1a(version_as_recorded(pa).data(), bytes);
  p.step = 1;
  EXPECT_TRUE(step(p, pa.data(), bytes, xb, t, n, pb.data(), bytes).ok());
  h = fnv1a(version_as_recorded(pb).data(), bytes, h);
  std::vector<uint8_t> y(n * 4);
  EXPECT_TRUE(decode(p, pb.data(), bytes, y.data(), t, n, 0.5f, nullptr).ok());
  return fnv1a(y.data(), n * (t == ElemType::kF32 ? 4 : 2), h);
}

struct Golden {
  CodecId codec;
  ElemType type;
  size_t n;
  uint64_t hash;
};

// The casts recorded from the scalar code before the CPU loops were vectorized; q* and CASQ from
// the generic CPU loops of their current rounding (every CPU path writes the same bytes:
// codec_paths_test.cc), docs/codecs.md.
const Golden kGolden[] = {
#include "tests/unit/kernels/codec_golden_hashes.inc"
};

const char* enum_name(CodecId c) {
  const char* const names[] = {"None",  "Bf16",  "Fp16", "Q8",     "Q4",  "Q2",  "Casq2",
                               "Casq3", "Casq4", "S2",   "Sparse", "Q8r", "Q4r", "Q2r"};
  const int i = int(c);
  return i < 14 ? names[i] : "?";
}

TEST(CodecGolden, PacketsKeepTheirBytes) {
  const bool print = std::getenv("SKETCHCCL_GOLDEN_PRINT") != nullptr;
  for (const Golden& g : kGolden) {
    const uint64_t h = chain_hash(g.codec, g.type, g.n);
    if (print) {
      std::printf("    {CodecId::k%s, ElemType::k%s, %zu, 0x%016llxull},\n", enum_name(g.codec),
                  g.type == ElemType::kF32   ? "F32"
                  : g.type == ElemType::kF16 ? "F16"
                                             : "Bf16",
                  g.n, static_cast<unsigned long long>(h));
    }
    EXPECT_EQ(h, g.hash) << codec_name(g.codec) << " type " << int(g.type) << " n " << g.n;
  }
}

// The conversions as first written (branches per case), the reference for the vector versions.
float ref_half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return detail::u2f(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return detail::u2f(sign);
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return detail::u2f(sign | ((exp + 112) << 23) | (man << 13));
}
uint16_t ref_float_to_half(float f) {
  uint32_t x = detail::f2u(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return sign;
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return uint16_t(sign | r);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
  return uint16_t(sign | ((r >> 13) - (112u << 10)));
}
uint16_t ref_float_to_bf16(float f) {
  uint32_t x = detail::f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

TEST(CodecGolden, ConversionsMatchTheReference) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    ASSERT_EQ(detail::f2u(detail::half_to_float(uint16_t(h))),
              detail::f2u(ref_half_to_float(uint16_t(h))))
        << h;
  }
  // Every pattern around the fp16 boundaries (subnormal, normal, overflow) and a stride over
  // the rest, both signs.
  auto check = [](uint32_t x) {
    const float f = detail::u2f(x);
    ASSERT_EQ(detail::float_to_half(f), ref_float_to_half(f)) << std::hex << x;
    ASSERT_EQ(detail::float_to_bf16(f), ref_float_to_bf16(f)) << std::hex << x;
  };
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t x = 0x32800000u; x < 0x39000000u; ++x)
      check(sign | x);
    for (uint32_t x = 0x477e0000u; x < 0x47810000u; ++x)
      check(sign | x);
    for (uint32_t x = 0x7f7f0000u; x <= 0x7fffffffu; ++x)
      check(sign | x);
    for (uint64_t x = 0; x < 0x80000000ull; x += 997)
      check(sign | uint32_t(x));
  }
}

// q_code's definition in doubles, the reference for its clamp on the floats and its fixed point:
// u = (v - min) * inv clamped to [0, L] (NaN to 0), then floor(u) plus one when the draw's top S
// bits reach 2^S - frac(u) * 2^S (truncated): probability frac(u) to within 2^-S.
template <uint32_t BITS>
uint32_t ref_q_code(float v, uint32_t r, const detail::QScale& s) {
  constexpr uint32_t S = detail::kQShift<BITS>;
  const float L = float((1u << BITS) - 1u);
  float u = (v - s.mn) * s.inv;
  if (!(u > 0.0f)) u = 0.0f;
  if (u > L) u = L;
  const double fl = std::floor(double(u));
  const double frac = std::floor((double(u) - fl) * double(1u << S));
  const double draw = double(r >> (32 - S));
  return uint32_t(fl) + (draw >= double(1u << S) - frac ? 1u : 0u);
}

TEST(CodecGolden, QCodeMatchesTheReference) {
  const float inf = detail::u2f(0x7f800000u);
  // Scales of real blocks, a subnormal step whose inverse overflows (0 * Inf = NaN), a
  // non-finite block's NaNs, and the zero range (inv 0).
  const detail::QScale scales[] = {
      {-1.5f, 0.01f, 100.0f},       {0.0f, 1e-30f, 1e30f},
      {0.0f, detail::u2f(1u), inf}, {detail::qnan(), detail::qnan(), 0.0f},
      {2.0f, 0.0f, 0.0f},           {-3.0e38f, 2.3e36f, 1.0f / 2.3e36f}};
  uint64_t st = 9;
  for (const detail::QScale& s : scales) {
    for (int k = 0; k < 200000; ++k) {
      st = detail::mix64(st);
      float v = detail::u2f(uint32_t(st));  // every kind of float, NaNs and Infs included
      if (k % 3 == 0) v = s.mn + float(int32_t(st >> 40) % 600 - 20) * s.sc * 0.5f;
      const uint32_t r = uint32_t(st >> 32);
      ASSERT_EQ(detail::q_code<8>(v, r, s), ref_q_code<8>(v, r, s)) << v;
      ASSERT_EQ(detail::q_code<4>(v, r, s), ref_q_code<4>(v, r, s)) << v;
      ASSERT_EQ(detail::q_code<2>(v, r, s), ref_q_code<2>(v, r, s)) << v;
    }
  }
}

}  // namespace
}  // namespace sketchccl::kernels
