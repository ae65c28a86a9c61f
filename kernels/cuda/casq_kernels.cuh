// Kernels of CASQ (cluster-aware sketch quantization). CASQ is not linear: a step decodes the
// incoming packet, adds the local slice, refits the clusters and re-encodes. On the device that
// is two passes over the slice and two small kernels:
//   k_casq_combine  (step)  incoming + x -> fp32 scratch, non-finite blocks, largest exponent;
//                   validates `in`
//   k_casq_mark     (encode) non-finite blocks of x, largest exponent
//   k_casq_fit      one block: sample, fit (kernels/casq_fit.h: tree folds over shared memory),
//                   header, sizes, mask, zeroing
//   k_casq_codes    codes, and each value into its bucket's fixed-point sum: per block in shared
//                   memory (up to kCasqSharedBuckets buckets), else global integer atomics
//   k_casq_table    bucket means, combining the blocks' sums in block order
// Every sum is an integer (fixed point) or a fixed-order tree, so the packet is the CPU build's.
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

// The code kernel's per-block bucket sums fit shared memory up to this many buckets (36 KiB;
// the default 1% of a 1 MiB slice is 2622); it then runs kCasqCodeBlocks blocks, whose sums
// k_casq_table adds in block order.
constexpr uint32_t kCasqSharedBuckets = 3072;
constexpr unsigned kCasqCodeBlocks = 128;
__host__ __device__ inline bool casq_block_sums(uint32_t buckets) {
  return buckets <= kCasqSharedBuckets;
}

// The largest exponent of the warp's finite values into *emax (casq_exponent). Warp-uniform.
__device__ __forceinline__ void warp_max_exponent(const float* v, uint32_t c, unsigned* emax) {
  unsigned e = 0;
  for (uint32_t k = 0; k < kGroup; ++k) {
    const unsigned ek = k < c ? detail::casq_exponent(v[k]) : 0u;
    e = ek > e ? ek : e;
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const unsigned t = __shfl_xor_sync(kFullMask, e, o);
    e = t > e ? t : e;
  }
  if ((threadIdx.x & (kWarp - 1)) == 0 && e != 0) atomicMax(emax, e);
}

// A validated packet's tables, in shared memory for the block.
struct CasqTables {
  uint32_t sizes[kCasqMaxK], off[kCasqMaxK];
  uint64_t salt;
};
__device__ void load_tables(const uint8_t* pkt, const CasqLayout& L, CasqTables* t) {
  if (threadIdx.x == 0) {
    memcpy(t->sizes, pkt + L.sizes_off, 4 * L.clusters);
    detail::casq_offsets(t->sizes, L.clusters, t->off);
    memcpy(&t->salt, pkt + offsetof(PacketHeader, salt), 8);
  }
  __syncthreads();
}

// Step, pass 1: tmp = decode(in) + x, and which 256-blocks of tmp hold a non-finite value (one
// byte per block). One warp per block, one lane per group of 8.
template <uint32_t BITS, int ET>
__global__ void k_casq_combine(const uint8_t* in, PacketHeader e, CasqLayout L, const void* x,
                               size_t n, float* tmp, uint8_t* nfb, unsigned* emax, int* err) {
  if (!block_packet_ok(in, e, err)) return;
  __shared__ CasqTables t;
  load_tables(in, L, &t);
  const float* table = reinterpret_cast<const float*>(in + L.table_off);
  const uint64_t* nf = reinterpret_cast<const uint64_t*>(in + L.nf_off);
  const uint8_t* codes = in + L.codes_off;
  for_each_block_by_warp(n, [&](size_t blk, size_t base, uint32_t lane, uint32_t c) {
    const size_t i0 = base + size_t(lane) * kGroup;
    float a[kGroup], v[kGroup];
    bool bad = false;
    for (uint32_t k = 0; k < kGroup; ++k)
      v[k] = 0.0f;
    if (c > 0) {
      detail::casq_group_values<BITS>(detail::load_le<BITS>(codes + (i0 / kGroup) * BITS), i0,
                                      detail::bit_get(nf, blk), table, t.off, t.sizes, t.salt, a);
      detail::load8<ET>(x, i0, c, v);
      for (uint32_t k = 0; k < kGroup; ++k) {
        v[k] = a[k] + v[k];
        bad |= k < c && !detail::is_finite(v[k]);
      }
      detail::store8<0>(tmp, i0, c, v);
    }
    warp_max_exponent(v, c, emax);
    bad = __any_sync(kFullMask, bad);
    if (lane == 0) nfb[blk] = bad ? 1 : 0;
  });
}

// Encode, pass 1: non-finite blocks of x, and the largest exponent.
template <int ET>
__global__ void k_casq_mark(const void* x, size_t n, uint8_t* nfb, unsigned* emax) {
  for_each_block_by_warp(n, [&](size_t blk, size_t base, uint32_t lane, uint32_t c) {
    float v[kGroup];
    detail::load8<ET>(x, base + size_t(lane) * kGroup, c, v);
    bool bad = false;
    for (uint32_t k = 0; k < kGroup; ++k)
      bad |= k < c && !detail::is_finite(v[k]);
    warp_max_exponent(v, c, emax);
    bad = __any_sync(kFullMask, bad);
    if (lane == 0) nfb[blk] = bad ? 1 : 0;
  });
}

// One block of kCasqLanes threads: the sample, the fit, and every part of the packet that does
// not need the second pass. Also zeroes the bucket sums for k_casq_codes.
template <int ET>
__global__ void k_casq_fit(const void* x, size_t n, const uint8_t* nfb, uint64_t key,
                           PacketHeader h, CasqLayout L, CasqFitScratch* f, unsigned long long* sum,
                           uint32_t* cnt, uint8_t* out, const int* err) {
  if (err != nullptr && *err) return;
  __shared__ detail::CasqPartials partials;
  BlockExec ex{&partials};
  const uint32_t S = uint32_t(n < detail::kCasqSample ? n : detail::kCasqSample);
  ex.lanes([&](uint32_t l) {
    for (uint32_t k = detail::casq_seg(l, S); k < detail::casq_seg(l + 1, S); ++k) {
      const size_t i = detail::casq_sample_index(key, n, S, k);
      f->sample[k] = nfb[i / detail::kBlock] ? 0.0f : detail::load_elem<ET>(x, i);
    }
  });
  detail::casq_fit(ex, S, L.bits, L.buckets, key, f);
  const size_t blocks = detail::div_up(n, detail::kBlock);
  const size_t code_end = L.codes_off + detail::div_up(n, kGroup) * L.bits;
  ex.lanes([&](uint32_t l) {
    if (l == 0) {
      memcpy(out, &h, sizeof(h));
      memcpy(out + L.sizes_off, f->sizes, 4 * L.clusters);
      // Padding after the sizes, the table and the codes (the rest is written in full).
      for (size_t b = L.sizes_off + 4 * L.clusters; b < L.table_off; ++b)
        out[b] = 0;
      for (size_t b = L.table_off + 4 * size_t(L.buckets); b < L.nf_off; ++b)
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
    for (size_t b = l; b < L.buckets && !casq_block_sums(L.buckets); b += detail::kCasqLanes) {
      sum[b] = 0;
      cnt[b] = 0;
    }
  });
}

// Pass 2: codes, one group of 8 per thread; each value goes into its bucket's fixed-point sum
// (exact, so the order of the additions does not matter). With few buckets each block sums in
// shared memory and writes its row of sums (kCasqCodeBlocks rows); else global atomics.
template <uint32_t BITS, int ET>
__global__ void k_casq_codes(const void* x, size_t n, const uint8_t* nfb, uint64_t salt,
                             const CasqFitScratch* f, uint8_t* codes, const unsigned* emax_p,
                             uint32_t buckets, unsigned long long* sum, uint32_t* cnt,
                             const int* err) {
  if (err != nullptr && *err) return;
  constexpr uint32_t K = 1u << BITS;
  __shared__ float thr[kCasqMaxK];
  __shared__ uint32_t sizes[kCasqMaxK], off[kCasqMaxK];
  __shared__ unsigned long long bsum[kCasqSharedBuckets];
  __shared__ uint32_t bcnt[kCasqSharedBuckets];
  const bool block_sums = casq_block_sums(buckets);
  if (threadIdx.x == 0) {
    detail::casq_thresholds(f->centers, K, thr);
    for (uint32_t c = 0; c < K; ++c)
      sizes[c] = f->sizes[c];
    detail::casq_offsets(sizes, K, off);
  }
  for (uint32_t b = threadIdx.x; block_sums && b < buckets; b += blockDim.x) {
    bsum[b] = 0;
    bcnt[b] = 0;
  }
  __syncthreads();
  const double unit = detail::casq_fix_scale(*emax_p, detail::casq_fix_headroom(n));
  auto add = [&](uint32_t b, float v) {
    const unsigned long long q = (unsigned long long)detail::casq_to_fix(v, unit);
    if (block_sums) {
      atomicAdd(bsum + b, q);
      atomicAdd(bcnt + b, 1u);
    } else {
      atomicAdd(sum + b, q);
      atomicAdd(cnt + b, 1u);
    }
  };
  for_each_group(n, [&](size_t g, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::load8<ET>(x, i0, c, v);
    detail::store_le<BITS>(codes + g * BITS,
                           detail::casq_group_codes<BITS>(v, c, i0, nfb[i0 / detail::kBlock] != 0,
                                                          thr, off, sizes, salt, add));
  });
  if (!block_sums) return;
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < buckets; b += blockDim.x) {
    sum[size_t(blockIdx.x) * buckets + b] = bsum[b];
    cnt[size_t(blockIdx.x) * buckets + b] = bcnt[b];
  }
}

// Bucket means (an empty bucket keeps its cluster's center), one bucket per thread; with block
// sums, the kCasqCodeBlocks rows are added in row order.
__global__ void k_casq_table(CasqLayout L, size_t n, const CasqFitScratch* f,
                             const unsigned long long* sum, const uint32_t* cnt,
                             const unsigned* emax_p, float* table, const int* err) {
  if (err != nullptr && *err) return;
  const uint32_t emax = *emax_p;
  const int head = detail::casq_fix_headroom(n);
  const unsigned rows = casq_block_sums(L.buckets) ? kCasqCodeBlocks : 1u;
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < L.buckets;
       b += size_t(gridDim.x) * blockDim.x) {
    uint32_t c = 0, end = f->sizes[0];
    while (b >= end && c + 1 < L.clusters)
      end += f->sizes[++c];
    unsigned long long s = 0;
    uint32_t k = 0;
    for (unsigned r = 0; r < rows; ++r) {
      s += sum[size_t(r) * L.buckets + b];
      k += cnt[size_t(r) * L.buckets + b];
    }
    table[b] = k ? detail::casq_fix_mean((long long)s, k, emax, head) : f->centers[c];
  }
}

template <uint32_t BITS, int ET>
__global__ void k_casq_decode(const uint8_t* pkt, PacketHeader e, CasqLayout L, size_t n, void* y,
                              float scale, int* err, unsigned long long* nonzeros) {
  if (!block_packet_ok(pkt, e, err)) return;
  __shared__ CasqTables t;
  load_tables(pkt, L, &t);
  const float* table = reinterpret_cast<const float*>(pkt + L.table_off);
  const uint64_t* nf = reinterpret_cast<const uint64_t*>(pkt + L.nf_off);
  const uint8_t* codes = pkt + L.codes_off;
  unsigned long long nz = 0;
  for_each_group(n, [&](size_t g, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::casq_group_values<BITS>(detail::load_le<BITS>(codes + g * BITS), i0,
                                    detail::bit_get(nf, i0 / detail::kBlock), table, t.off, t.sizes,
                                    t.salt, v);
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
