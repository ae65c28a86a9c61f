// The CPU build's paths and the CUDA build's routines write the same bytes:
//  - every CPU path this machine has (generic loops, AVX2, AVX-512: kernels/host/cpu_ops_*.h)
//    against the generic one, for every codec with path-specific loops (the casts, q*, CASQ,
//    s2) and the sparse helpers, element type and size, specials included;
//  - the routines the CUDA kernels run per lane (kernels/cuda/*_kernels.cuh: q_block.h's lane
//    functions, CASQ's group functions and the lane-structured fit of casq_fit.h), driven here
//    the way the kernels drive them, against the CPU drivers. The GPU itself is compared in
//    codec_gpu_test.cc when a device is present; this part runs everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/casq_fit.h"
#include "kernels/codec.h"
#include "kernels/codec_impl.h"
#include "kernels/codec_internal.h"
#include "kernels/host/cpu_ops_common.h"
#include "kernels/host/cpu_path.h"
#include "kernels/rotation.h"
#include "kernels/sparse.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

using detail::CpuPath;
using detail::CpuPathScope;
using testing::Dist;
using testing::make_data;
using testing::Packet;
using testing::params_for;

const CodecId kPathCodecs[] = {CodecId::kBf16, CodecId::kFp16,  CodecId::kQ8,    CodecId::kQ4,
                               CodecId::kQ2,   CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4,
                               CodecId::kS2,   CodecId::kQ8r,   CodecId::kQ4r,   CodecId::kQ2r};
const CodecId kLaneCodecs[] = {CodecId::kQ8,    CodecId::kQ4,    CodecId::kQ2,
                               CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4,
                               CodecId::kQ8r,   CodecId::kQ4r,   CodecId::kQ2r};

// Inputs whose blocks exercise every branch: ordinary values, an offset block (1000 + small), a
// constant block, a block of zeros, a huge-range block (overflowing max - min), tiny and
// subnormal values, and NaN / Inf in later blocks.
std::vector<float> path_input(size_t n, uint64_t seed, bool specials) {
  std::vector<float> v = make_data(Dist::kLaplace, n, seed);
  if (!specials) return v;
  for (size_t i = 0; i < n; ++i) {
    const size_t blk = i / 256;
    switch (blk % 9) {
      case 1:
        v[i] = 1000.0f + v[i] * 1e-3f;
        break;
      case 2:
        v[i] = 3.5f;
        break;
      case 3:
        v[i] = 0.0f;
        break;
      case 4:
        v[i] = (i % 2 ? 3.0e38f : -3.0e38f) * (0.5f + 0.5f * std::fabs(std::tanh(v[i])));
        break;
      case 5:
        v[i] *= 1e-39f;  // subnormal
        break;
      case 6:
        v[i] *= 1e-25f;
        break;
      case 7:
        if (i % 97 == 5) v[i] = i % 2 ? detail::qnan() : detail::u2f(0xff800000u);
        break;
      default:
        break;
    }
  }
  return v;
}

std::vector<uint8_t> as_type(const std::vector<float>& v, ElemType t) {
  std::vector<uint8_t> b(v.size() * elem_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == ElemType::kF32) {
      memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h =
          t == ElemType::kF16 ? detail::float_to_half(v[i]) : detail::float_to_bf16(v[i]);
      memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

// encode of a, step of b out of place and in place, decode of the step's packet (scale 0.5):
// every byte of the three packets and of the output.
std::vector<uint8_t> chain_bytes(const CodecParams& p0, ElemType t, size_t n,
                                 const std::vector<float>& a, const std::vector<float>& b) {
  CodecParams p = p0;
  const std::vector<uint8_t> xa = as_type(a, t), xb = as_type(b, t);
  const size_t bytes = packet_bytes(p, n);
  Packet pa(bytes), pb(bytes);
  EXPECT_TRUE(encode(p, xa.data(), t, n, pa.data(), bytes).ok());
  p.step = 1;
  EXPECT_TRUE(step(p, pa.data(), bytes, xb.data(), t, n, pb.data(), bytes).ok());
  Packet pc = pa;
  EXPECT_TRUE(step(p, pc.data(), bytes, xb.data(), t, n, pc.data(), bytes).ok());
  std::vector<uint8_t> y(n * elem_size(t) + 1);
  DecodeStats st;
  EXPECT_TRUE(decode(p, pb.data(), bytes, y.data(), t, n, 0.5f, &st).ok());
  std::vector<uint8_t> all = pa.raw();
  const std::vector<uint8_t> rb = pb.raw(), rc = pc.raw();
  all.insert(all.end(), rb.begin(), rb.end());
  all.insert(all.end(), rc.begin(), rc.end());
  all.insert(all.end(), y.begin(), y.end());
  const uint8_t* nz = reinterpret_cast<const uint8_t*>(&st.nonzeros);
  all.insert(all.end(), nz, nz + 8);
  return all;
}

TEST(CpuPaths, EveryPathWritesTheGenericBytes) {
  std::vector<CpuPath> paths;
  for (CpuPath q : {CpuPath::kAvx2, CpuPath::kAvx512}) {
    if (detail::cpu_path_available(q)) paths.push_back(q);
  }
  if (paths.empty()) GTEST_SKIP() << "this CPU has the generic path only";
  for (CodecId c : kPathCodecs) {
    for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBf16}) {
      for (size_t n : {size_t(1), size_t(7), size_t(256), size_t(257), size_t(2311),
                       size_t(9 * 256 * 2 + 100), size_t(70000)}) {
        for (bool specials : {false, true}) {
          for (bool nearest : {false, true}) {
            if (nearest && !detail::is_casq(c)) continue;
            SCOPED_TRACE(::testing::Message()
                         << codec_name(c) << " type " << int(t) << " n " << n << " specials "
                         << specials << " nearest " << nearest);
            CodecParams p = params_for(c, n, 5 + n);
            p.casq_nearest = nearest;
            const std::vector<float> a = path_input(n, 11 + n, specials);
            std::vector<float> b = path_input(n, 12 + n, specials);
            for (float& x : b)
              x *= 0.75f;
            std::vector<uint8_t> want;
            {
              CpuPathScope s(CpuPath::kGeneric);
              want = chain_bytes(p, t, n, a, b);
            }
            for (CpuPath q : paths) {
              CpuPathScope s(q);
              EXPECT_TRUE(chain_bytes(p, t, n, a, b) == want) << "path " << int(q);
            }
          }
        }
      }
    }
  }
}

// bitmap_build and sparse_scatter (the sparse codec's helpers, fp32: the paths' compares and
// expands) on every path against the generic loops.
TEST(CpuPaths, SparseHelpersWriteTheGenericBytes) {
  std::vector<CpuPath> paths;
  for (CpuPath q : {CpuPath::kAvx2, CpuPath::kAvx512}) {
    if (detail::cpu_path_available(q)) paths.push_back(q);
  }
  if (paths.empty()) GTEST_SKIP() << "this CPU has the generic path only";
  for (size_t n : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(1000), size_t(70001)}) {
    for (double density : {0.01, 0.3, 1.0}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " density " << density);
      std::vector<float> x = make_data(Dist::kGauss, n, 7 + n);
      uint64_t st = 5 + n;
      for (size_t i = 0; i < n; ++i) {
        st = detail::mix64(st);
        if (double(st >> 11) * (1.0 / 9007199254740992.0) >= density) x[i] = 0.0f;
        if (i % 101 == 3) x[i] = -0.0f;
        if (i % 211 == 7) x[i] = detail::qnan();
        if (i % 307 == 11) x[i] = detail::u2f(0x00000003u);  // subnormal: non-zero
      }
      const size_t words = bitmap_bytes(n) / 8;
      std::vector<float> vals(n + 1);
      for (size_t i = 0; i < vals.size(); ++i)
        vals[i] = float(i) * 0.25f - 3.0f;
      std::vector<uint64_t> bits_g(words), bits_p(words);
      std::vector<float> y_g(n), y_p(n);
      size_t k_g = 0;
      {
        CpuPathScope s(CpuPath::kGeneric);
        bitmap_build(x.data(), ElemType::kF32, n, bits_g.data());
        k_g = sparse_scatter(bits_g.data(), n, vals.data(), 0.5f, y_g.data(), ElemType::kF32);
      }
      for (CpuPath q : paths) {
        CpuPathScope s(q);
        bitmap_build(x.data(), ElemType::kF32, n, bits_p.data());
        EXPECT_TRUE(bits_p == bits_g) << "path " << int(q);
        const size_t k_p =
            sparse_scatter(bits_g.data(), n, vals.data(), 0.5f, y_p.data(), ElemType::kF32);
        EXPECT_EQ(k_p, k_g) << "path " << int(q);
        EXPECT_EQ(0, memcmp(y_p.data(), y_g.data(), 4 * n)) << "path " << int(q);
      }
    }
  }
}

// ---- the CUDA build's routines, driven on the CPU as its kernels drive them --------------------

using LaneValues = float[detail::kQLanes][detail::kGroup];

// warp_fwht: each lane's group, then the stages across lanes as __shfl_xor_sync pairs them (every
// lane reads its partner's value from before the stage).
void lanes_fwht(LaneValues v) {
  for (uint32_t lane = 0; lane < detail::kQLanes; ++lane)
    detail::fwht_group(v[lane]);
  for (uint32_t o = 1; o < detail::kQLanes; o <<= 1) {
    LaneValues before;
    std::memcpy(before, v, sizeof(before));
    for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
      for (uint32_t k = 0; k < detail::kGroup; ++k)
        v[lane][k] = detail::fwht_pair(before[lane][k], before[lane ^ o][k], (lane & o) != 0);
    }
  }
}
// warp_rotate and warp_unrotate.
void lanes_rotate(LaneValues v, uint64_t bkey, bool inverse) {
  for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
    const uint32_t s = detail::rot_group_signs(bkey, lane);
    for (uint32_t k = 0; k < detail::kGroup; ++k)
      v[lane][k] = v[lane][k] * (inverse ? detail::kRotScale : detail::rot_mult((s >> k) & 1u));
  }
  lanes_fwht(v);
  if (!inverse) return;
  for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
    const uint32_t s = detail::rot_group_signs(bkey, lane);
    for (uint32_t k = 0; k < detail::kGroup; ++k)
      v[lane][k] = detail::rot_unsign(v[lane][k], (s >> k) & 1u);
  }
}

// k_quant: one warp per record, lane l with elements 8l .. 8l + 7; the range a reduction over
// the lanes (exact: any order), then every lane writes its codes (lane 0 min and scale). A
// rotated codec rotates the block of x first, and every lane holds 8 values.
void lanes_quant(const CodecParams& p, const uint8_t* in_body, const float* x, size_t n,
                 uint8_t* body) {
  const uint64_t key = detail::stream_key(p.seed, p.call, p.offset_key, p.step);
  const uint64_t rkey = detail::rot_key(p.seed, p.call, p.offset_key);
  const bool rot = detail::codec_rotated(p.codec);
  const uint32_t bits = detail::codec_bits(p.codec);
  const size_t R = detail::q_record_bytes(bits);
  for (size_t rec = 0, base = 0; base < n; ++rec, base += detail::kBlock) {
    LaneValues v;
    uint32_t cnt[detail::kQLanes];
    detail::QRange r{detail::u2f(0x7f800000u), detail::u2f(0xff800000u), 0u};
    if (rot) {
      for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
        detail::load8<0>(x, base + lane * detail::kGroup, detail::q_lane_count(lane, n - base),
                         v[lane]);
      }
      lanes_rotate(v, detail::rot_block_key(rkey, rec), false);
    }
    for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
      cnt[lane] = detail::q_lane_count(lane, n - base);
      const uint8_t* ir = in_body != nullptr ? in_body + rec * R : nullptr;
      if (rot) {
        cnt[lane] = detail::kGroup;
        if (ir == nullptr) continue;
        if (bits == 8) detail::q_lane_add_record<8>(ir, lane, cnt[lane], v[lane]);
        if (bits == 4) detail::q_lane_add_record<4>(ir, lane, cnt[lane], v[lane]);
        if (bits == 2) detail::q_lane_add_record<2>(ir, lane, cnt[lane], v[lane]);
        continue;
      }
      switch (bits) {
        case 8:
          detail::q_lane_load<8, 0>(ir, x, base, lane, cnt[lane], v[lane]);
          break;
        case 4:
          detail::q_lane_load<4, 0>(ir, x, base, lane, cnt[lane], v[lane]);
          break;
        default:
          detail::q_lane_load<2, 0>(ir, x, base, lane, cnt[lane], v[lane]);
          break;
      }
    }
    for (uint32_t lane = detail::kQLanes; lane-- > 0;)  // another order than the warp's
      r = detail::q_range_merge(r, detail::q_range_lane(v[lane], cnt[lane]));
    const uint32_t k32 = detail::q_block_key(key, rec);
    for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
      uint8_t* out = body + rec * R;
      switch (bits) {
        case 8:
          detail::q_lane_store<8>(out, lane, v[lane], cnt[lane], k32, detail::q_scale<8>(r));
          break;
        case 4:
          detail::q_lane_store<4>(out, lane, v[lane], cnt[lane], k32, detail::q_scale<4>(r));
          break;
        default:
          detail::q_lane_store<2>(out, lane, v[lane], cnt[lane], k32, detail::q_scale<2>(r));
          break;
      }
    }
  }
}

// k_quant_decode of a rotated codec: each lane's values, the warp's inverse rotation, times the
// scale, canonical NaN.
void lanes_rot_decode(const CodecParams& p, const uint8_t* body, size_t n, float scale, float* y) {
  const uint64_t rkey = detail::rot_key(p.seed, p.call, p.offset_key);
  const uint32_t bits = detail::codec_bits(p.codec);
  const size_t R = detail::q_record_bytes(bits);
  for (size_t rec = 0, base = 0; base < n; ++rec, base += detail::kBlock) {
    LaneValues v;
    float mn, sc;
    detail::q_record_scale(body + rec * R, &mn, &sc);
    for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
      const uint8_t* codes = body + rec * R + 8 + lane * bits;
      if (bits == 8) detail::q_load_values<8>(codes, detail::kGroup, mn, sc, v[lane]);
      if (bits == 4) detail::q_load_values<4>(codes, detail::kGroup, mn, sc, v[lane]);
      if (bits == 2) detail::q_load_values<2>(codes, detail::kGroup, mn, sc, v[lane]);
    }
    lanes_rotate(v, detail::rot_block_key(rkey, rec), true);
    for (uint32_t j = 0; j < detail::kBlock && base + j < n; ++j)
      y[base + j] = detail::canon_nan(v[j / detail::kGroup][j % detail::kGroup] * scale);
  }
}

// The fit's executor with each step's lanes in a shuffled order (threads run in any order).
struct ShuffledLanes {
  detail::CasqPartials* partials;
  uint64_t s = 99;
  detail::CasqPartials* part() { return partials; }
  template <typename F>
  void lanes(F&& fn) {
    std::vector<uint32_t> order(detail::kCasqLanes);
    for (uint32_t l = 0; l < detail::kCasqLanes; ++l)
      order[l] = l;
    for (uint32_t l = detail::kCasqLanes - 1; l > 0; --l) {
      s = detail::mix64(s);
      std::swap(order[l], order[s % (l + 1)]);
    }
    for (uint32_t l : order)
      fn(l);
  }
  template <typename F>
  void one(F&& fn) {
    fn();
  }
};

// k_casq_combine / k_casq_mark, k_casq_fit (the lane-structured fit, lanes in a shuffled order
// as threads may run), k_casq_codes: the whole packet.
template <uint32_t BITS>
void lanes_casq(const CodecParams& p, const uint8_t* in, const float* x, size_t n, uint8_t* out) {
  constexpr uint32_t K = 1u << BITS;
  const detail::CasqLayout L = detail::casq_layout(BITS, n);
  const uint64_t key = detail::stream_key(p.seed, p.call, p.offset_key, p.step);
  const size_t blocks = detail::div_up(n, detail::kBlock);
  std::vector<float> tmp(n);
  std::vector<uint8_t> nfb(blocks);
  const size_t subs = detail::div_up(n, detail::kCasqSub);
  std::vector<float> scl(blocks * detail::kCasqSubs);
  float warm[K];
  for (size_t blk = 0; blk < blocks; ++blk) {
    const size_t base = blk * detail::kBlock;
    uint32_t m[detail::kCasqSubs] = {};
    bool bad = false;
    for (uint32_t lane = 0; lane < detail::kQLanes; ++lane) {
      const size_t i0 = base + size_t(lane) * detail::kGroup;
      const uint32_t c = detail::q_lane_count(lane, n - base);
      if (c == 0) continue;
      float a[detail::kGroup], v[detail::kGroup];
      detail::load8<0>(x, i0, c, v);
      if (in != nullptr) {
        const float* table = reinterpret_cast<const float*>(in + L.table_off);
        const uint16_t* in_scl = reinterpret_cast<const uint16_t*>(in + L.scales_off);
        const uint64_t* nf = reinterpret_cast<const uint64_t*>(in + L.nf_off);
        detail::casq_group_values<BITS>(
            detail::load_le<BITS>(in + L.codes_off + (i0 / detail::kGroup) * BITS),
            detail::bit_get(nf, blk), detail::casq_scale_value(in_scl[i0 / detail::kCasqSub]),
            table, a);
        for (uint32_t k = 0; k < detail::kGroup; ++k)
          v[k] = a[k] + v[k];
      }
      for (uint32_t k = 0; k < c; ++k) {
        tmp[i0 + k] = v[k];
        bad |= !detail::is_finite(v[k]);
        m[lane / 8] = std::max(m[lane / 8], detail::casq_abs_bits(v[k]));
      }
    }
    nfb[blk] = bad ? 1 : 0;
    for (uint32_t q = 0; q < detail::kCasqSubs; ++q)
      scl[blk * detail::kCasqSubs + q] = bad ? 0.0f : detail::casq_scale(m[q]);
  }
  if (in != nullptr) memcpy(warm, in + L.table_off, 4 * K);
  auto f = std::make_unique<detail::CasqFitScratch>();
  auto partials = std::make_unique<detail::CasqPartials>();
  const uint32_t S = detail::casq_sample_blocks(n);
  for (uint32_t l = 0; l < detail::kBlock; ++l) {
    for (uint32_t k = 0; k < S; ++k) {
      const size_t blk = detail::casq_sample_block(key, n, S, k);
      if (blk * detail::kBlock + l < n) {
        f->sample[k * detail::kBlock + l] = detail::casq_unit(
            tmp[blk * detail::kBlock + l], scl[(blk * detail::kBlock + l) / detail::kCasqSub]);
      }
    }
  }
  ShuffledLanes ex{partials.get()};
  detail::casq_fit(ex, detail::casq_sample_count(key, n), BITS, key, in != nullptr ? warm : nullptr,
                   f.get());
  memset(out, 0, L.total);
  const detail::PacketHeader h = detail::expected_header(p, n);  // as the launch code writes it
  memcpy(out, &h, sizeof(h));
  for (uint32_t c = 0; c < K; ++c) {
    const uint32_t one = 1;
    memcpy(out + L.sizes_off + 4 * c, &one, 4);
  }
  memcpy(out + L.table_off, f->centers, 4 * K);
  uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
  uint16_t* out_scl = reinterpret_cast<uint16_t*>(out + L.scales_off);
  for (size_t b = 0; b < blocks; ++b) {
    if (nfb[b]) nf[b >> 6] |= 1ull << (b & 63);
  }
  for (size_t b = 0; b < subs; ++b)
    out_scl[b] = uint16_t(detail::f2u(scl[b]) >> 16);
  for (size_t g = 0; g * detail::kGroup < n; ++g) {
    const size_t i0 = g * detail::kGroup;
    const uint32_t c = uint32_t(std::min<size_t>(detail::kGroup, n - i0));
    float v[detail::kGroup];
    detail::load8<0>(tmp.data(), i0, c, v);
    const size_t blk = i0 / detail::kBlock;
    detail::CasqThresholds t;
    detail::casq_thresholds<K>(f->centers, scl[i0 / detail::kCasqSub], &t);
    detail::store_le<BITS>(
        out + L.codes_off + g * BITS,
        detail::casq_group_codes<BITS>(v, c, i0, nfb[blk] != 0, t, detail::casq_block_key(key, blk),
                                       p.casq_nearest));
  }
}

void lanes_casq_any(const CodecParams& p, const uint8_t* in, const float* x, size_t n,
                    uint8_t* out) {
  switch (detail::codec_bits(p.codec)) {
    case 2:
      lanes_casq<2>(p, in, x, n, out);
      break;
    case 3:
      lanes_casq<3>(p, in, x, n, out);
      break;
    default:
      lanes_casq<4>(p, in, x, n, out);
      break;
  }
}

TEST(LaneRoutines, MatchTheCpuDrivers) {
  for (CodecId c : kLaneCodecs) {
    for (size_t n : {size_t(1), size_t(255), size_t(256), size_t(1000), size_t(9 * 256 * 2 + 77),
                     size_t(40000)}) {
      for (bool specials : {false, true}) {
        for (bool nearest : {false, true}) {
          if (nearest && !detail::is_casq(c)) continue;
          SCOPED_TRACE(::testing::Message() << codec_name(c) << " n " << n << " specials "
                                            << specials << " nearest " << nearest);
          CodecParams p = params_for(c, n, 3 + n);
          p.casq_nearest = nearest;
          const std::vector<float> a = path_input(n, 21 + n, specials);
          const std::vector<float> b = path_input(n, 22 + n, specials);
          const size_t bytes = packet_bytes(p, n);
          Packet cpu_a(bytes), cpu_b(bytes), gpu_a(bytes), gpu_b(bytes);
          ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, cpu_a.data(), bytes).ok());
          CodecParams ps = p;
          ps.step = 1;
          ASSERT_TRUE(
              step(ps, cpu_a.data(), bytes, b.data(), ElemType::kF32, n, cpu_b.data(), bytes).ok());
          uint8_t* ga = static_cast<uint8_t*>(gpu_a.data());
          uint8_t* gb = static_cast<uint8_t*>(gpu_b.data());
          if (detail::is_casq(c)) {
            lanes_casq_any(p, nullptr, a.data(), n, ga);
            lanes_casq_any(ps, static_cast<const uint8_t*>(cpu_a.data()), b.data(), n, gb);
          } else {
            memcpy(ga, cpu_a.data(), sizeof(detail::PacketHeader));
            memcpy(gb, cpu_b.data(), sizeof(detail::PacketHeader));
            lanes_quant(p, nullptr, a.data(), n, ga + sizeof(detail::PacketHeader));
            lanes_quant(ps,
                        static_cast<const uint8_t*>(cpu_a.data()) + sizeof(detail::PacketHeader),
                        b.data(), n, gb + sizeof(detail::PacketHeader));
          }
          EXPECT_TRUE(cpu_a.raw() == gpu_a.raw()) << "encode";
          EXPECT_TRUE(cpu_b.raw() == gpu_b.raw()) << "step";
          if (detail::codec_rotated(c)) {
            std::vector<float> y_cpu(n), y_gpu(n);
            ASSERT_TRUE(
                decode(ps, cpu_b.data(), bytes, y_cpu.data(), ElemType::kF32, n, 0.5f, nullptr)
                    .ok());
            lanes_rot_decode(
                ps, static_cast<const uint8_t*>(cpu_b.data()) + sizeof(detail::PacketHeader), n,
                0.5f, y_gpu.data());
            EXPECT_EQ(0, memcmp(y_cpu.data(), y_gpu.data(), 4 * n)) << "decode";
          }
        }
      }
    }
  }
}

// The stream's jumps (the CPU's closed form) are rand32's steps (the GPU's loop).
TEST(LaneRoutines, StreamJumpsAreTheStreamsSteps) {
  for (uint32_t k32 : {0u, 1u, 0xdeadbeefu}) {
    uint32_t r[detail::kBlock];
    detail::stream_block(k32, r);
    for (uint32_t j = 0; j < detail::kBlock; ++j) {
      ASSERT_EQ(r[j], detail::rand32(k32, j)) << j;
      const uint32_t seed = detail::stream_seed(k32, j % detail::kStreamLanes);
      const uint32_t i = j / detail::kStreamLanes;
      ASSERT_EQ(r[j], seed * detail::kStreamJumps.a[i] + detail::kStreamJumps.c[i]) << j;
    }
  }
}

}  // namespace
}  // namespace sketchccl::kernels
