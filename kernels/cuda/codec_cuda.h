// CUDA launch wrappers of the codecs (the same SCCL_HD routines as the CPU build, see
// kernels/codec_impl.h). The device path's second rung launches the linear codecs' on the
// caller's stream (docs/cuda.md, src/coll/device_ring.h); unit_kernels_codec_gpu checks them
// against the CPU build. All
// pointers are device pointers and every call is stream-ordered and asynchronous: nothing here
// synchronizes except read_device_error.
//
// Packets are validated on the device, inside the kernels that read them: every thread block
// checks the header (and CASQ's table sizes) against the expected one before touching the
// payload, and block 0 writes the reason into the workspace, which the call's later kernels (and
// read_device_error) read; a malformed packet is never read out of bounds. The host-side checks
// (parameters, capacities, packet length, overlap) return a Status at once.
//
// Work decomposition (one pass over the slice for the linear codecs' step): casts one group of
// 8 elements per thread, q* one warp per 256-element record, s2 one thread block per 256-block,
// CASQ two passes and a one-block fit (kernels/cuda/casq_kernels.cuh). Loads and stores of
// element groups are 16-byte vector accesses when aligned (kernels/group_io.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/codec.h"

namespace sketchccl::kernels::cuda {

// Device workspace (bytes, 256-aligned start) that encode/step/decode need for (p, n).
size_t workspace_bytes(const CodecParams& p, size_t n);

// call_dev (linear codecs only; else kInvalidArgument): the call number is not p.call but the
// word there, mapped host memory the host writes after the launch is enqueued and before the
// stream reaches it; the kernels derive the stochastic-rounding and rotation keys from it as the
// host derives them from p.call (the device path's ring program, src/coll/device_ring.h).
Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt, size_t cap,
              void* ws, size_t ws_bytes, cudaStream_t stream, const uint64_t* call_dev = nullptr);

Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
            size_t n, void* out, size_t cap, void* ws, size_t ws_bytes, cudaStream_t stream,
            const uint64_t* call_dev = nullptr);

// stats_dev: optional device DecodeStats, written by the kernels (its `unresolved` is not
// read). s2 decoding enqueues all of its peeling rounds (kernels/s2_peel.h) and never
// synchronizes. unresolved_dev: optional device bitmap of bitmap_words(n) words, overwritten by
// an s2 decode with the positions left to the median estimate (DecodeStats::unresolved).
Status decode(const CodecParams& p, const void* pkt, size_t pkt_bytes, void* y, ElemType t,
              size_t n, float scale, DecodeStats* stats_dev, void* ws, size_t ws_bytes,
              cudaStream_t stream, uint64_t* unresolved_dev = nullptr,
              const uint64_t* call_dev = nullptr);

// Synchronizes `stream` and returns the device-side verdict of the last step/decode on ws.
Status read_device_error(const void* ws, cudaStream_t stream);
// The Status of a verdict read some other way (the first int of the workspace).
Status verdict_status(int verdict);

// Sparse helpers (kernels/sparse.h) on the device. count_dev receives the popcount.
void bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits, cudaStream_t stream);
void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n, cudaStream_t stream);
void bitmap_popcount(const uint64_t* bits, size_t n, unsigned long long* count_dev,
                     cudaStream_t stream);
size_t sparse_workspace_bytes(size_t n);
void sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out, void* ws,
                    cudaStream_t stream);
void sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                    ElemType t, void* ws, cudaStream_t stream);

// Error feedback (kernels/error_feedback.h) on device arrays. ef_update zeroes sums_dev (two
// doubles: the input's and the residual's sums of squares) and adds the slice's sums to it.
Status ef_compensate(const void* x, ElemType t, size_t n, const float* residual, float* out,
                     cudaStream_t stream);
Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                 double* sums_dev, cudaStream_t stream);

// The two-shot scheme's fp32 sums (kernels/sum.h) on device arrays: sum = float(x);
// sum += v (an fp32 decode of a contribution, elementwise); y = T(sum * scale).
Status load_sum(const void* x, ElemType t, size_t n, float* sum, cudaStream_t stream);
Status add_sum(const float* v, size_t n, float* sum, cudaStream_t stream);
Status store_sum(const float* sum, size_t n, float scale, ElemType t, void* y, cudaStream_t stream);

// Kernel preloading: each loads every kernel instantiation of its file on the current device
// (cudaFuncGetAttributes), so that no module load happens later, in the middle of a caller's
// stream, and raises *max_local_bytes to the largest per-thread local (stack) size among them,
// for cudaLimitStackSize. Call on the caller's thread before the first launch.
cudaError_t preload_codec_kernels(size_t* max_local_bytes);   // codec_cuda.cu
cudaError_t preload_sparse_kernels(size_t* max_local_bytes);  // sparse_cuda.cu
cudaError_t preload_ef_kernels(size_t* max_local_bytes);      // error_feedback.cu
cudaError_t preload_sum_kernels(size_t* max_local_bytes);     // sum_cuda.cu
// All four.
cudaError_t preload_kernels(size_t* max_local_bytes);

}  // namespace sketchccl::kernels::cuda
