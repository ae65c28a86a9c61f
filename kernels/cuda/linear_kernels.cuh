// Kernels of the linear codecs (none, bf16, fp16, q8/q4/q2, q8r/q4r/q2r): encode, the fused step,
// decode. Each is one pass over the slice; a step validates the incoming packet inside the same
// kernel (block_packet_ok) and rewrites it in place.
#pragma once

#include "kernels/cuda/device_util.cuh"
#include "kernels/group_io.h"
#include "kernels/q_block.h"
#include "kernels/rotation.h"

namespace sketchccl::kernels::cuda {
namespace {

using detail::kGroup;
using detail::PacketHeader;

// A launch's stochastic-rounding and rotation keys: computed on the host (`call` null), or, where
// the call number is a word of mapped host memory written only after the launch was enqueued (the
// device path's ring program, src/coll/device_ring.h), derived from that word on the device the
// same way (so the packets are the same bits).
struct QKeys {
  uint64_t key = 0, rkey = 0;
  const uint64_t* call = nullptr;
  uint64_t seed = 0;
  uint32_t offset_key = 0, step = 0;
  __device__ __forceinline__ void resolve(uint64_t* k, uint64_t* rk) const {
    if (call == nullptr) {
      *k = key;
      *rk = rkey;
      return;
    }
    const uint64_t c = *reinterpret_cast<const volatile uint64_t*>(call);
    *k = detail::stream_key(seed, c, offset_key, step);
    *rk = detail::rot_key(seed, c, offset_key);
  }
};

// ---- casts: one group of 8 per thread; PET is the packet's element type ----------------------
// pkt_in: the incoming packet (step, may be `out`), or null (encode: the header is written).
template <int PET, int ET>
__global__ void k_cast(const uint8_t* pkt_in, PacketHeader e, const void* x, size_t n, uint8_t* out,
                       int* err) {
  if (pkt_in != nullptr) {
    if (!block_packet_ok(pkt_in, e, err)) return;
  } else if (blockIdx.x == 0 && threadIdx.x == 0) {
    memcpy(out, &e, sizeof(e));
  }
  const uint8_t* in_body = pkt_in != nullptr ? pkt_in + sizeof(PacketHeader) : nullptr;
  uint8_t* body = out + sizeof(PacketHeader);
  for_each_group(n, [&](size_t, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::load8<ET>(x, i0, c, v);
    float a[kGroup];
    if (in_body != nullptr) detail::load8<PET>(in_body, i0, c, a);
    for (uint32_t k = 0; k < kGroup; ++k)  // packets hold only the canonical NaN
      v[k] = detail::canon_nan(in_body != nullptr ? a[k] + v[k] : v[k]);
    detail::store8<PET>(body, i0, c, v);
  });
}

template <int PET, int ET>
__global__ void k_cast_decode(const uint8_t* pkt, PacketHeader e, size_t n, void* y, float scale,
                              int* err, unsigned long long* nonzeros) {
  if (!block_packet_ok(pkt, e, err)) return;
  const uint8_t* body = pkt + sizeof(PacketHeader);
  unsigned long long nz = 0;
  for_each_group(n, [&](size_t, size_t i0, uint32_t c) {
    float v[kGroup];
    detail::load8<PET>(body, i0, c, v);
    for (uint32_t k = 0; k < kGroup; ++k) {
      v[k] = detail::canon_nan(v[k] * scale);
      nz += k < c && v[k] != 0.0f;
    }
    detail::store8<ET>(y, i0, c, v);
  });
  warp_add_to(nz, nonzeros);
}

// ---- q*: one warp per record of 256, one lane per 8 elements (kernels/q_block.h) -------------
template <uint32_t BITS>
__device__ __forceinline__ detail::QRange warp_range(detail::QRange r) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    detail::QRange b;
    b.lo = __shfl_xor_sync(kFullMask, r.lo, o);
    b.hi = __shfl_xor_sync(kFullMask, r.hi, o);
    b.nonfinite = __shfl_xor_sync(kFullMask, r.nonfinite, o);
    r = detail::q_range_merge(r, b);
  }
  return r;
}

// The transform of a block held by a warp, a group of 8 per lane (kernels/rotation.h): the
// stages inside the group, then those across groups in the CPU's order.
__device__ __forceinline__ void warp_fwht(float v[kGroup], uint32_t lane) {
  detail::fwht_group(v);
  for (uint32_t o = 1; o < kWarp; o <<= 1) {
    const bool upper = (lane & o) != 0;
    for (uint32_t k = 0; k < kGroup; ++k)
      v[k] = detail::fwht_pair(v[k], __shfl_xor_sync(kFullMask, v[k], int(o)), upper);
  }
}
// The forward rotation (signs and 1/16, then the transform) and its inverse.
__device__ __forceinline__ void warp_rotate(float v[kGroup], uint64_t bkey, uint32_t lane) {
  const uint32_t s = detail::rot_group_signs(bkey, lane);
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = v[k] * detail::rot_mult((s >> k) & 1u);
  warp_fwht(v, lane);
}
__device__ __forceinline__ void warp_unrotate(float v[kGroup], uint64_t bkey, uint32_t lane) {
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = v[k] * detail::kRotScale;
  warp_fwht(v, lane);
  const uint32_t s = detail::rot_group_signs(bkey, lane);
  for (uint32_t k = 0; k < kGroup; ++k)
    v[k] = detail::rot_unsign(v[k], (s >> k) & 1u);
}

// Encode (pkt_in null: the header is written) or the fused step (pkt_in: the incoming packet,
// possibly `out` itself: every lane reads its part of the record before the warp's reduction,
// and writes after it). ROT (q8r/q4r/q2r): the block of x, zeros past n, is rotated first (rkey:
// rot_key), and every record is whole.
template <uint32_t BITS, int ET, bool ROT>
__global__ void k_quant(QKeys keys, const uint8_t* pkt_in, PacketHeader e, const void* x, size_t n,
                        uint8_t* out, int* err) {
  uint64_t key = 0, rkey = 0;
  keys.resolve(&key, &rkey);
  if (pkt_in != nullptr) {
    if (!block_packet_ok(pkt_in, e, err)) return;
  } else if (blockIdx.x == 0 && threadIdx.x == 0) {
    memcpy(out, &e, sizeof(e));
  }
  const size_t R = detail::q_record_bytes(BITS);
  const uint8_t* in_body = pkt_in != nullptr ? pkt_in + sizeof(PacketHeader) : nullptr;
  uint8_t* body = out + sizeof(PacketHeader);
  for_each_block_by_warp(n, [&](size_t rec, size_t base, uint32_t lane, uint32_t c) {
    float v[kGroup];
    const uint8_t* in_rec = in_body != nullptr ? in_body + rec * R : nullptr;
    if constexpr (ROT) {
      detail::load8<ET>(x, base + size_t(lane) * kGroup, c, v);
      warp_rotate(v, detail::rot_block_key(rkey, rec), lane);
      c = kGroup;
      if (in_rec != nullptr) detail::q_lane_add_record<BITS>(in_rec, lane, c, v);
    } else {
      detail::q_lane_load<BITS, ET>(in_rec, x, base, lane, c, v);
    }
    const detail::QScale s = detail::q_scale<BITS>(warp_range<BITS>(detail::q_range_lane(v, c)));
    __syncwarp();
    detail::q_lane_store<BITS>(body + rec * R, lane, v, c, detail::q_block_key(key, rec), s);
  });
}

// ROT: the record's values rotated back (a non-finite record's NaN spreads over its block).
template <uint32_t BITS, int ET, bool ROT>
__global__ void k_quant_decode(QKeys keys, const uint8_t* pkt, PacketHeader e, size_t n, void* y,
                               float scale, int* err, unsigned long long* nonzeros) {
  uint64_t key = 0, rkey = 0;
  keys.resolve(&key, &rkey);
  (void)key;
  if (!block_packet_ok(pkt, e, err)) return;
  const size_t R = detail::q_record_bytes(BITS);
  const uint8_t* body = pkt + sizeof(PacketHeader);
  unsigned long long nz = 0;
  for_each_block_by_warp(n, [&](size_t rec, size_t base, uint32_t lane, uint32_t c) {
    const uint8_t* r = body + rec * R;
    float mn, sc, v[kGroup];
    detail::q_record_scale(r, &mn, &sc);
    detail::q_load_values<BITS>(r + 8 + lane * BITS, kGroup, mn, sc, v);
    if constexpr (ROT) warp_unrotate(v, detail::rot_block_key(rkey, rec), lane);
    for (uint32_t k = 0; k < kGroup; ++k) {
      v[k] = detail::canon_nan(v[k] * scale);
      nz += k < c && v[k] != 0.0f;
    }
    detail::store8<ET>(y, base + size_t(lane) * kGroup, c, v);
  });
  warp_add_to(nz, nonzeros);
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
