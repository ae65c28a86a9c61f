// Device-side building blocks of the codec kernels: warp sums, the per-block packet verdict, and
// the block executor that runs the shared lane-structured routines (kernels/casq_fit.h).
#pragma once

#include <cuda_runtime.h>

#include "kernels/casq_fit.h"
#include "kernels/codec_impl.h"
#include "kernels/group_io.h"
#include "kernels/q_block.h"

namespace sketchccl::kernels::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

// Adds the warp's total of v to *dst (one atomic per warp). Every lane of the warp must call it.
__device__ __forceinline__ void warp_add_to(unsigned long long v, unsigned long long* dst) {
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFullMask, v, o);
  if ((threadIdx.x & (kWarp - 1)) == 0 && v != 0) atomicAdd(dst, v);
}

// The block's verdict on a received packet, checked before any payload access: thread 0 checks
// the header (and CASQ's table sizes), block 0 records the reason in *err for the call's later
// kernels and read_device_error. Block-uniform; every thread of the block must call it.
__device__ bool block_packet_ok(const uint8_t* pkt, const detail::PacketHeader& e, int* err) {
  __shared__ int verdict;
  if (threadIdx.x == 0) {
    verdict = detail::packet_verdict(pkt, e);
    if (blockIdx.x == 0) *err = verdict;
  }
  __syncthreads();
  return verdict == detail::kPacketOk;
}

// Runs lane-structured routines in one thread block of kCasqLanes (or fewer) threads; the
// per-lane partials are the block's shared memory.
struct BlockExec {
  detail::CasqPartials* partials;
  __device__ detail::CasqPartials* part() { return partials; }
  template <typename F>
  __device__ void lanes(F&& f) {
    for (uint32_t l = threadIdx.x; l < detail::kCasqLanes; l += blockDim.x)
      f(l);
    __syncthreads();
  }
  template <typename F>
  __device__ void one(F&& f) {
    if (threadIdx.x == 0) f();
    __syncthreads();
  }
};

// f(g, i0, cnt) for every group g of 8 elements [i0, i0 + cnt) of [0, n): one per thread,
// grid-stride.
template <typename F>
__device__ __forceinline__ void for_each_group(size_t n, F&& f) {
  const size_t groups = detail::div_up(n, detail::kGroup);
  for (size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x; g < groups;
       g += size_t(gridDim.x) * blockDim.x) {
    const size_t i0 = g * detail::kGroup;
    f(g, i0, uint32_t(n - i0 < detail::kGroup ? n - i0 : detail::kGroup));
  }
}

// f(blk, base, lane, cnt) for every 256-element block [base, base + 256) of [0, n): one warp per
// block, the lane's 8 elements [base + 8 lane, + cnt). Warp-uniform, so f may use the warp's
// shuffles and votes.
template <typename F>
__device__ __forceinline__ void for_each_block_by_warp(size_t n, F&& f) {
  const uint32_t lane = threadIdx.x % kWarp;
  const size_t blocks = detail::div_up(n, detail::kBlock);
  const size_t warps = size_t(gridDim.x) * (blockDim.x / kWarp);
  for (size_t blk = blockIdx.x * size_t(blockDim.x / kWarp) + threadIdx.x / kWarp; blk < blocks;
       blk += warps) {
    const size_t base = blk * detail::kBlock;
    f(blk, base, lane, detail::q_lane_count(lane, n - base));
  }
}

}  // namespace
}  // namespace sketchccl::kernels::cuda
