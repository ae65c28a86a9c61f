// Kernels of CASQ (cluster-aware stochastic quantization). CASQ is not linear: a step decodes
// the incoming packet, adds the local slice, refits the levels and re-encodes. On the device that
// is two passes over the slice and one small kernel:
//   k_casq_combine  (step)  incoming + x -> fp32 scratch, non-finite blocks, the scales of
//                   the sub-blocks; validates `in`
//   k_casq_mark     (encode) non-finite blocks and the sub-blocks' scales of x
//   k_casq_fit      one block: sample (whole sampled blocks), fit (kernels/casq_fit.h: integer
//                   sums folded over shared memory; a step starts from the incoming levels),
//                   header, sizes, levels, mask, scales, padding
//   k_casq_codes    codes: stochastic rounding between adjacent levels, one group of 8 per thread
// Every sum of the fit is an integer and the rounding is counter-based, so the packet is the CPU
// build's.
#pragma once

#include "kernels/casq_fit.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/group_io.h"

namespace sketchccl::kernels::cuda {
namespace {

using detail::CasqFitScratch;
using detail::CasqLayout;
using detail::kCasqMaxK;
using detail::kGroup;
using detail::PacketHeader;

// The sub-block's largest |v| as fp32 bits (casq_abs_bits: an integer maximum, exact in any
// order), the same on the kCasqSub / kGroup lanes of each sub-block of the warp's block.
static_assert(detail::kCasqSub / kGroup == 8, "a sub-block is 8 lanes of a warp");
__device__ __forceinline__ uint32_t sub_absmax_bits(const float* v, uint32_t c) {
  uint32_t m = 0;
  for (uint32_t k = 0; k < kGroup; ++k) {
    const uint32_t b = k < c ? detail::casq_abs_bits(v[k]) : 0u;
    m = b > m ? b : m;
  }
  for (int o = 4; o > 0; o >>= 1) {
    const uint32_t t = __shfl_xor_sync(kFullMask, m, o);
    m = t > m ? t : m;
  }
  return m;
}

// Step, pass 1: tmp = decode(in) + x, which 256-blocks of tmp hold a non-finite value (one byte
// per block) and the sub-blocks' scales (0 in a non-finite block). One warp per block, one lane
// per group of 8.
template <uint32_t BITS, int ET>
__global__ void k_casq_combine(const uint8_t* in, PacketHeader e, CasqLayout L, const void* x,
                               size_t n, float* tmp, uint8_t* nfb, float* scl, int* err) {
  if (!block_packet_ok(in, e, err)) return;
  const float* table = reinterpret_cast<const float*>(in + L.table_off);
  const uint16_t* in_scl = reinterpret_cast<const uint16_t*>(in + L.scales_off);
  const uint64_t* nf = reinterpret_cast<const uint64_t*>(in + L.nf_off);
  const uint8_t* codes = in + L.codes_off;
  for_each_block_by_warp(n, [&](size_t blk, size_t base, uint32_t lane, uint32_t c) {
    const size_t i0 = base + size_t(lane) * kGroup;
    float a[kGroup], v[kGroup];
    bool bad = false;
    for (uint32_t k = 0; k < kGroup; ++k)
      v[k] = 0.0f;
    if (c > 0) {
      detail::casq_group_values<BITS>(
          detail::load_le<BITS>(codes + (i0 / kGroup) * BITS), detail::bit_get(nf, blk),
          detail::casq_scale_value(in_scl[i0 / detail::kCasqSub]), table, a);
      detail::load8<ET>(x, i0, c, v);
      for (uint32_t k = 0; k < kGroup; ++k) {
        v[k] = a[k] + v[k];
        bad |= k < c && !detail::is_finite(v[k]);
      }
      detail::store8<0>(tmp, i0, c, v);
    }
    const uint32_t m = sub_absmax_bits(v, c);
    bad = __any_sync(kFullMask, bad);
    if (lane == 0) nfb[blk] = bad ? 1 : 0;
    if (lane % 8 == 0) scl[blk * detail::kCasqSubs + lane / 8] = bad ? 0.0f : detail::casq_scale(m);
  });
}

// Encode, pass 1: non-finite blocks of x, and the blocks' scales.
template <int ET>
__global__ void k_casq_mark(const void* x, size_t n, uint8_t* nfb, float* scl) {
  for_each_block_by_warp(n, [&](size_t blk, size_t base, uint32_t lane, uint32_t c) {
    float v[kGroup];
    detail::load8<ET>(x, base + size_t(lane) * kGroup, c, v);
    bool bad = false;
    for (uint32_t k = 0; k < kGroup; ++k)
      bad |= k < c && !detail::is_finite(v[k]);
    const uint32_t m = sub_absmax_bits(v, c);
    bad = __any_sync(kFullMask, bad);
    if (lane == 0) nfb[blk] = bad ? 1 : 0;
    if (lane % 8 == 0) scl[blk * detail::kCasqSubs + lane / 8] = bad ? 0.0f : detail::casq_scale(m);
  });
}

// One block of kCasqLanes threads: the sample, the fit, and every part of the packet but the
// codes. in: the step's incoming packet (its levels start the fit; read before out, which may be
// in, is written), or null (encode).
static_assert(detail::kCasqLanes == detail::kBlock, "a thread per element of a sampled block");
template <int ET>
__global__ void k_casq_fit(const void* x, size_t n, const uint8_t* nfb, const float* scl,
                           uint64_t key, PacketHeader h, CasqLayout L, const uint8_t* in,
                           CasqFitScratch* f, uint8_t* out, const int* err) {
  if (err != nullptr && *err) return;
  __shared__ detail::CasqPartials partials;
  __shared__ float warm[kCasqMaxK];
  BlockExec ex{&partials};
  if (in != nullptr && threadIdx.x < L.clusters) {
    memcpy(&warm[threadIdx.x], in + L.table_off + 4 * threadIdx.x, 4);
  }
  const uint32_t S = detail::casq_sample_blocks(n);
  ex.lanes([&](uint32_t l) {
    for (uint32_t k = 0; k < S; ++k) {
      const size_t blk = detail::casq_sample_block(key, n, S, k);
      const size_t i = blk * detail::kBlock + l;
      if (i < n)
        f->sample[k * detail::kBlock + l] =
            nfb[blk] ? 0.0f
                     : detail::casq_unit(detail::load_elem<ET>(x, i), scl[i / detail::kCasqSub]);
    }
  });
  detail::casq_fit(ex, detail::casq_sample_count(key, n), L.bits, key,
                   in != nullptr ? warm : nullptr, f);
  const size_t blocks = detail::div_up(n, detail::kBlock);
  const size_t subs = detail::div_up(n, detail::kCasqSub);
  const size_t code_end = L.codes_off + detail::div_up(n, kGroup) * L.bits;
  ex.lanes([&](uint32_t l) {
    if (l == 0) {
      memcpy(out, &h, sizeof(h));
      for (uint32_t c = 0; c < L.clusters; ++c) {
        const uint32_t one = 1;
        memcpy(out + L.sizes_off + 4 * c, &one, 4);
      }
      memcpy(out + L.table_off, f->centers, 4 * L.clusters);
      // Padding after the sizes, the table and the codes (the rest is written in full).
      for (size_t b = L.sizes_off + 4 * L.clusters; b < L.table_off; ++b)
        out[b] = 0;
      for (size_t b = L.table_off + 4 * size_t(L.buckets); b < L.nf_off; ++b)
        out[b] = 0;
      for (size_t b = L.scales_off + 2 * subs; b < L.codes_off; ++b)
        out[b] = 0;
      for (size_t b = code_end; b < L.total; ++b)
        out[b] = 0;
    }
    uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
    for (size_t w = l; w < detail::nf_words(n); w += detail::kCasqLanes) {
      uint64_t word = 0;
      for (size_t b = 0; b < 64 && w * 64 + b < blocks; ++b)
        word |= uint64_t(nfb[w * 64 + b] != 0) << b;
      nf[w] = word;
    }
    uint16_t* out_scl = reinterpret_cast<uint16_t*>(out + L.scales_off);
    for (size_t b = l; b < subs; b += detail::kCasqLanes)
      out_scl[b] = uint16_t(detail::f2u(scl[b]) >> 16);  // bf16 values: exact
  });
}

// Pass 2: codes, one group of 8 per thread, against its sub-block's thresholds (the levels times
// the sub-block's scale: casq_thresholds, as the CPU computes them once per sub-block).
template <uint32_t BITS, int ET>
__global__ void k_casq_codes(const void* x, size_t n, const uint8_t* nfb, const float* scl,
                             uint64_t key, bool nearest, const CasqFitScratch* f, uint8_t* codes,
                             const int* err) {
  if (err != nullptr && *err) return;
  constexpr uint32_t K = 1u << BITS;
  __shared__ float lvl[kCasqMaxK];
  if (threadIdx.x < K) lvl[threadIdx.x] = f->centers[threadIdx.x];
  __syncthreads();
  for_each_group(n, [&](size_t g, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::load8<ET>(x, i0, c, v);
    const size_t blk = i0 / detail::kBlock;
    detail::CasqThresholds t;
    detail::casq_thresholds<K>(lvl, scl[i0 / detail::kCasqSub], &t);
    detail::store_le<BITS>(codes + g * BITS, detail::casq_group_codes<BITS>(
                                                 v, c, i0, nfb[blk] != 0, t,
                                                 detail::casq_block_key(key, blk), nearest));
  });
}

template <uint32_t BITS, int ET>
__global__ void k_casq_decode(const uint8_t* pkt, PacketHeader e, CasqLayout L, size_t n, void* y,
                              float scale, int* err, unsigned long long* nonzeros) {
  if (!block_packet_ok(pkt, e, err)) return;
  const float* table = reinterpret_cast<const float*>(pkt + L.table_off);
  const uint16_t* scl = reinterpret_cast<const uint16_t*>(pkt + L.scales_off);
  const uint64_t* nf = reinterpret_cast<const uint64_t*>(pkt + L.nf_off);
  const uint8_t* codes = pkt + L.codes_off;
  unsigned long long nz = 0;
  for_each_group(n, [&](size_t g, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::casq_group_values<BITS>(detail::load_le<BITS>(codes + g * BITS),
                                    detail::bit_get(nf, i0 / detail::kBlock),
                                    detail::casq_scale_value(scl[i0 / detail::kCasqSub]), table, v);
    for (uint32_t k = 0; k < kGroup; ++k) {
      v[k] = detail::canon_nan(v[k] * scale);
      nz += k < c && v[k] != 0.0f;
    }
    detail::store8<ET>(y, i0, c, v);
  });
  warp_add_to(nz, nonzeros);
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
