// Kernels of s2 (bitmap-informed count sketch). Encode and the fused step are one kernel: each
// 256-block is checked for non-finite values, its non-zeros set their bitmap bits and are added
// to the sketch rows. Decoding (kernels/s2_peel.h) peels in rounds of two kernels (claim;
// resolve and subtract) over exact fixed-point residuals, then the positions left get the
// median of their rows' estimates.
#pragma once

#include "kernels/cuda/device_util.cuh"
#include "kernels/s2_peel.h"

namespace sketchccl::kernels::cuda {
namespace {

using detail::bit_get;
using detail::kBlock;
using detail::kMaxS2Rows;
using detail::PacketHeader;
using detail::qnan;
using detail::s2_bucket;
using detail::store_elem;

// Encode (pkt_in null: `out` is zeroed, the header is written) or the fused step (pkt_in is the
// incoming packet, which is `out` itself). One thread block of kBlock threads per 256-block.
template <int ET>
__global__ void k_s2_accumulate(const uint8_t* pkt_in, PacketHeader e, const void* x, size_t n,
                                uint8_t* out, int* err) {
  if (pkt_in != nullptr) {
    if (!block_packet_ok(pkt_in, e, err)) return;
  } else if (blockIdx.x == 0 && threadIdx.x == 0) {
    memcpy(out, &e, sizeof(e));
  }
  const detail::S2Layout L = detail::s2_layout(e.rows, e.p0, n);
  unsigned long long* bm = reinterpret_cast<unsigned long long*>(out + L.bitmap_off);
  unsigned long long* nf = reinterpret_cast<unsigned long long*>(out + L.nf_off);
  double* sk = reinterpret_cast<double*>(out + L.sketch_off);
  const size_t blocks = detail::div_up(n, kBlock);
  for (size_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {  // block-uniform
    const size_t i = blk * kBlock + threadIdx.x;
    const float v = i < n ? detail::load_elem<ET>(x, i) : 0.0f;
    if (__syncthreads_or(i < n && !detail::is_finite(v))) {
      if (threadIdx.x == 0) atomicOr(nf + (blk >> 6), 1ull << (blk & 63));
      continue;
    }
    // Set by an earlier rank: the block decodes as NaN anyway. Only this block sets this bit.
    if ((nf[blk >> 6] >> (blk & 63)) & 1u) continue;
    const bool nonzero = i < n && v != 0.0f;
    // A warp's 32 elements share one bitmap word (blocks start at multiples of 256).
    const unsigned ballot = __ballot_sync(kFullMask, nonzero);
    if (threadIdx.x % kWarp == 0 && ballot != 0) {
      atomicOr(bm + (i >> 6), (unsigned long long)ballot << (i & 63));
    }
    if (!nonzero) continue;
    for (uint32_t r = 0; r < L.rows; ++r) {
      bool neg;
      const uint32_t b = s2_bucket(e.salt, r, i, L.counters, &neg);
      atomicAdd(sk + size_t(r) * L.counters + b, neg ? -double(v) : double(v));
    }
  }
}

// Decode, first kernel: the packet's verdict (the peeling kernels then check *err).
__global__ void k_validate(const uint8_t* pkt, PacketHeader e, int* err) {
  *err = detail::packet_verdict(pkt, e);
}

// The decode's shared updates (kernels/s2_peel.h) as atomics. Every update is an integer
// addition, XOR or minimum, so the result does not depend on the order threads run in; the
// 128-bit residual adds its low word, then the carry into its high word.
struct S2DeviceOps {
  __device__ __forceinline__ void add_u32(uint32_t* p, uint32_t v) const { atomicAdd(p, v); }
  __device__ __forceinline__ void xor_u64(uint64_t* p, uint64_t v) const {
    atomicXor(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
  }
  __device__ __forceinline__ void min_u32(uint32_t* p, uint32_t v) const { atomicMin(p, v); }
  __device__ __forceinline__ void add_fix(detail::S2Fix* p, detail::S2Fix v) const {
    const unsigned long long old =
        atomicAdd(reinterpret_cast<unsigned long long*>(&p->lo), (unsigned long long)v.lo);
    const uint64_t hi = v.hi + (old + v.lo < old ? 1u : 0u);
    if (hi != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&p->hi), (unsigned long long)hi);
  }
};

// The fixed point's scale: the largest exponent of the sketch's counters (a max: order-free).
__global__ void k_s2_emax(const double* sk, size_t nc, int* emax, const int* err) {
  if (*err) return;
  int m = 0;
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    const int e = detail::s2_exponent(sk[id]);
    m = e > m ? e : m;
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const int t = __shfl_xor_sync(kFullMask, m, o);
    m = t > m ? t : m;
  }
  if ((threadIdx.x & (kWarp - 1)) == 0 && m > 0) atomicMax(emax, m);
}

// Residuals in fixed point; the counters' counts and XORs start from zero (memset).
__global__ void k_s2_fix(const double* sk, size_t nc, const int* emax, detail::S2Fix* res,
                         const int* err) {
  if (*err) return;
  const int e = *emax;
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    res[id] = detail::s2_to_fix(sk[id], e);
  }
}

// Every position: in the support or not, counted into its counters.
__global__ void k_s2_init(detail::S2Peel s, size_t n, unsigned long long* nonzeros,
                          const int* err) {
  if (*err) return;
  unsigned long long nz = 0;
  const S2DeviceOps ops;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    nz += detail::s2_init_position(ops, s, i) ? 1u : 0u;
  }
  warp_add_to(nz, nonzeros);
}

// Round r, part 1: pure counters claim their positions; pure[r] counts them. A round after one
// without pure counters returns at once (and leaves its count 0), so the host can enqueue every
// round without reading anything back.
__global__ void k_s2_claim(detail::S2Peel s, size_t nc, int r, unsigned long long* pure,
                           const int* err) {
  if (*err || (r > 0 && pure[r - 1] == 0)) return;
  unsigned long long np = 0;
  const S2DeviceOps ops;
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    np += detail::s2_claim(ops, s, id) ? 1u : 0u;
  }
  warp_add_to(np, pure + r);
}

// Round r, part 2: the winners resolve their positions and subtract them.
__global__ void k_s2_resolve(detail::S2Peel s, size_t nc, int r, const unsigned long long* pure,
                             const int* err) {
  if (*err || pure[r] == 0) return;
  const S2DeviceOps ops;
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    detail::s2_resolve(ops, s, id);
  }
}

// Every position's value into y (resolved, median estimate, 0, or NaN); the statistics; the
// unresolved positions into `unres` (null: not asked; else zeroed before).
template <int ET>
__global__ void k_s2_output(detail::S2Peel s, const int* emax, const uint64_t* nf, size_t n,
                            void* y, float scale, unsigned long long* stats,
                            unsigned long long* unres, const int* err) {
  if (*err) return;
  s.unit = detail::s2_unit(*emax);
  unsigned long long peeled = 0, estimated = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    peeled += s.state[i] == detail::kS2Peeled ? 1u : 0u;
    estimated += s.state[i] == detail::kS2Open ? 1u : 0u;
    store_elem<ET>(y, i, detail::s2_output(s, nf, i, scale));
    if (unres != nullptr && detail::s2_unresolved(s, nf, i)) {
      atomicOr(unres + (i >> 6), 1ull << (i & 63));
    }
  }
  warp_add_to(peeled, stats + 0);
  warp_add_to(estimated, stats + 1);
}

__global__ void k_stats_out(const unsigned long long* stats, DecodeStats* out, const int* err) {
  if (*err) return;
  out->peeled = stats[0];
  out->estimated = stats[1];
  out->nonzeros = stats[2];
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
