// Kernels of s2 (bitmap-informed count sketch). Encode and the fused step are one kernel: each
// 256-block is checked for non-finite values, its non-zeros set their bitmap bits and are added
// to the sketch rows. Decoding peels in parallel rounds (claim, resolve, subtract), then the
// positions left get the median of their rows' estimates.
#pragma once

#include "kernels/cuda/device_util.cuh"

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

// Counts and index XORs of the set positions per counter.
__global__ void k_s2_init(const uint64_t* bm, size_t n, uint64_t salt, uint32_t rows,
                          uint32_t counters, uint32_t* cnt, unsigned long long* xr, uint8_t* state,
                          unsigned long long* nonzeros, const int* err) {
  if (*err) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    state[i] = 2;  // not in the support: nothing to resolve
    if (!bit_get(bm, i)) continue;
    state[i] = 0;
    atomicAdd(nonzeros, 1ull);
    for (uint32_t r = 0; r < rows; ++r) {
      bool neg;
      size_t id = size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg);
      atomicAdd(cnt + id, 1u);
      atomicXor(xr + id, (unsigned long long)i);
    }
  }
}

// Round, part 1: each pure counter (one unresolved position) proposes itself for its position;
// the lowest counter id wins, so the result does not depend on thread timing.
__global__ void k_s2_claim(size_t nc, const uint32_t* cnt, const unsigned long long* xr,
                           uint32_t* claim) {
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    if (cnt[id] == 1) atomicMin(claim + xr[id], uint32_t(id));
  }
}

// Part 2: winners resolve their position from the (unchanged this round) residual.
__global__ void k_s2_resolve(size_t nc, uint64_t salt, uint32_t counters, const uint32_t* cnt,
                             const unsigned long long* xr, const double* res, uint32_t* claim,
                             uint8_t* state, double* val, unsigned long long* progress) {
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    if (cnt[id] != 1) continue;
    size_t i = size_t(xr[id]);
    if (claim[i] != uint32_t(id)) continue;
    bool neg;
    s2_bucket(salt, uint32_t(id / counters), i, counters, &neg);
    val[i] = neg ? -res[id] : res[id];  // rounded to fp32 only at the output, as on the CPU
    state[i] = 1;
    claim[i] = 0xffffffffu;
    atomicAdd(progress, 1ull);
  }
}

// Part 3: positions resolved this round leave their counters.
__global__ void k_s2_subtract(size_t n, uint64_t salt, uint32_t rows, uint32_t counters,
                              uint8_t* state, const double* val, double* res, uint32_t* cnt,
                              unsigned long long* xr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (state[i] != 1) continue;
    state[i] = 3;  // resolved by peeling
    double v = val[i];
    for (uint32_t r = 0; r < rows; ++r) {
      bool neg;
      size_t id = size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg);
      atomicAdd(res + id, neg ? v : -v);
      atomicSub(cnt + id, 1u);
      atomicXor(xr + id, (unsigned long long)i);
    }
  }
}

// Leftovers get the median of their rows' residual estimates; then the output.
template <int ET>
__global__ void k_s2_output(size_t n, uint64_t salt, uint32_t rows, uint32_t counters,
                            const uint8_t* state, const double* val, const double* res,
                            const uint64_t* nf, void* y, float scale, unsigned long long* stats,
                            const int* err) {
  if (*err) return;
  unsigned long long peeled = 0, estimated = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float o = 0.0f;
    if (state[i] == 3) {
      o = float(val[i]);
      peeled++;
    } else if (state[i] == 0) {
      double est[kMaxS2Rows];
      for (uint32_t r = 0; r < rows; ++r) {
        bool neg;
        double cv = res[size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg)];
        double e = neg ? -cv : cv;
        uint32_t j = r;
        while (j > 0 && est[j - 1] > e) {
          est[j] = est[j - 1];
          --j;
        }
        est[j] = e;
      }
      o = float(rows & 1 ? est[rows / 2] : 0.5 * (est[rows / 2 - 1] + est[rows / 2]));
      estimated++;
    }
    o = bit_get(nf, i / kBlock) ? qnan() : detail::canon_nan(o * scale);
    store_elem<ET>(y, i, o);
  }
  if (peeled) atomicAdd(stats + 0, peeled);
  if (estimated) atomicAdd(stats + 1, estimated);
}

__global__ void k_stats_out(const unsigned long long* stats, DecodeStats* out, const int* err) {
  if (*err) return;
  out->peeled = stats[0];
  out->estimated = stats[1];
  out->nonzeros = stats[2];
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
