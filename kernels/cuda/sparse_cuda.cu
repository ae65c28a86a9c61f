// CUDA build of the sparse codec's helpers (kernels/sparse.h): bitmaps, compaction, scatter.
#include <cuda_runtime.h>

#include "kernels/codec_internal.h"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/cuda/launch_util.cuh"

namespace sketchccl::kernels::cuda {

using namespace detail;  // NOLINT: the detail routines' driver

namespace {

template <int ET>
__global__ void k_bitmap_build(const void* x, size_t n, uint64_t* bits) {
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < bitmap_words(n);
       w += size_t(gridDim.x) * blockDim.x) {
    uint64_t v = 0;
    size_t base = w * 64, cnt = n - base < 64 ? n - base : 64;
    for (size_t j = 0; j < cnt; ++j)
      v |= uint64_t(load_elem<ET>(x, base + j) != 0.0f) << j;
    bits[w] = v;
  }
}

__device__ uint64_t masked_word(const uint64_t* bits, size_t n, size_t w) {
  uint64_t v = bits[w];
  if (w == bitmap_words(n) - 1 && (n & 63)) v &= (1ull << (n & 63)) - 1;
  return v;
}

__global__ void k_popcount(const uint64_t* bits, size_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < bitmap_words(n);
       w += size_t(gridDim.x) * blockDim.x) {
    local += __popcll(masked_word(bits, n, w));
  }
  if (local) atomicAdd(count, local);
}

// The exclusive prefix of the words' popcounts, by every block, on the device (the host never
// waits for a partial count): tiles of
// kTileWords words, one block per tile at a time; tile sums, a scan of them, then each tile's
// words. Integer sums: the same whatever the order.
constexpr size_t kWordsPerThread = 8;
constexpr size_t kTileWords = kThreads * kWordsPerThread;

// Exclusive scan of v over the block (every thread calls it); *total gets the block's sum.
__device__ unsigned long long block_exclusive_scan(unsigned long long v,
                                                   unsigned long long* total) {
  constexpr int kWarps = kThreads / 32;
  __shared__ unsigned long long warp_sums[kWarps];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  unsigned long long x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += t;
  }
  if (lane == 31) warp_sums[wid] = x;
  __syncthreads();
  if (wid == 0) {
    unsigned long long w = lane < kWarps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    if (lane < kWarps) warp_sums[lane] = w;
  }
  __syncthreads();
  const unsigned long long before = wid > 0 ? warp_sums[wid - 1] : 0;
  *total = warp_sums[kWarps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return before + x - v;
}

// This thread's words of tile `tile` and their popcount.
__device__ unsigned long long thread_words(const uint64_t* bits, size_t n, size_t tile, size_t* lo,
                                           size_t* hi) {
  const size_t words = bitmap_words(n);
  *lo = tile * kTileWords + threadIdx.x * kWordsPerThread;
  *hi = *lo + kWordsPerThread < words ? *lo + kWordsPerThread : words;
  unsigned long long s = 0;
  for (size_t w = *lo; w < *hi; ++w)
    s += __popcll(masked_word(bits, n, w));
  return s;
}

__global__ void k_tile_sums(const uint64_t* bits, size_t n, unsigned long long* tile_sums) {
  const size_t tiles = div_up(bitmap_words(n), kTileWords);
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // block-uniform
    size_t lo, hi;
    unsigned long long total;
    block_exclusive_scan(thread_words(bits, n, tile, &lo, &hi), &total);
    if (threadIdx.x == 0) tile_sums[tile] = total;
  }
}

// One block: the exclusive scan of the tile sums, in place (a few per million elements).
__global__ void k_scan_tiles(unsigned long long* tile_sums, size_t tiles) {
  unsigned long long carry = 0;
  for (size_t base = 0; base < tiles; base += kThreads) {  // block-uniform
    const size_t t = base + threadIdx.x;
    const unsigned long long v = t < tiles ? tile_sums[t] : 0;
    unsigned long long total;
    const unsigned long long ex = block_exclusive_scan(v, &total);
    if (t < tiles) tile_sums[t] = carry + ex;
    carry += total;
  }
}

__global__ void k_word_prefix(const uint64_t* bits, size_t n, const unsigned long long* tile_sums,
                              unsigned long long* prefix) {
  const size_t tiles = div_up(bitmap_words(n), kTileWords);
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // block-uniform
    size_t lo, hi;
    unsigned long long total;
    unsigned long long s =
        tile_sums[tile] + block_exclusive_scan(thread_words(bits, n, tile, &lo, &hi), &total);
    for (size_t w = lo; w < hi; ++w) {
      prefix[w] = s;
      s += __popcll(masked_word(bits, n, w));
    }
  }
}

// prefix[w] for every word w of the bitmap; ws holds the tile sums after the prefix.
void word_prefix(const uint64_t* bits, size_t n, unsigned long long* prefix, cudaStream_t s) {
  const size_t words = bitmap_words(n);
  const size_t tiles = div_up(words, kTileWords);
  unsigned long long* tile_sums = prefix + al(words * 8) / 8;
  const unsigned g = blocks_for(tiles, 1);
  SCCL_LAUNCH(g, kThreads, 0, s, k_tile_sums)(bits, n, tile_sums);
  SCCL_LAUNCH(1, kThreads, 0, s, k_scan_tiles)(tile_sums, tiles);
  SCCL_LAUNCH(g, kThreads, 0, s, k_word_prefix)(bits, n, tile_sums, prefix);
}

template <int ET>
__global__ void k_compact(const uint64_t* bits, size_t n, const void* x,
                          const unsigned long long* prefix, float* out) {
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < bitmap_words(n);
       w += size_t(gridDim.x) * blockDim.x) {
    uint64_t v = masked_word(bits, n, w);
    size_t k = prefix[w];
    while (v) {
      out[k++] = load_elem<ET>(x, w * 64 + size_t(__ffsll((long long)v) - 1));
      v &= v - 1;
    }
  }
}

template <int ET>
__global__ void k_scatter(const uint64_t* bits, size_t n, const float* vals, float scale,
                          const unsigned long long* prefix, void* y) {
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < bitmap_words(n);
       w += size_t(gridDim.x) * blockDim.x) {
    uint64_t v = masked_word(bits, n, w);
    size_t k = prefix[w], base = w * 64, cnt = n - base < 64 ? n - base : 64;
    for (size_t j = 0; j < cnt; ++j) {
      float o = 0.0f;
      if ((v >> j) & 1) o = vals[k++] * scale;
      store_elem<ET>(y, base + j, o);
    }
  }
}

}  // namespace

void bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits, cudaStream_t s) {
  if (n == 0) return;
  (void)by_type(t, [&](auto et) {
    SCCL_LAUNCH(grid_for(bitmap_words(n)), kThreads, 0, s, k_bitmap_build<decltype(et)::value>)
    (x, n, bits);
  });
}

void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n, cudaStream_t s) {
  if (n == 0) return;
  SCCL_LAUNCH(grid_for(bitmap_words(n)), kThreads, 0, s, k_or_words)
  (acc, other, bitmap_words(n), nullptr);
}

void bitmap_popcount(const uint64_t* bits, size_t n, unsigned long long* count_dev,
                     cudaStream_t s) {
  cudaMemsetAsync(count_dev, 0, sizeof(*count_dev), s);
  if (n == 0) return;
  SCCL_LAUNCH(grid_for(bitmap_words(n)), kThreads, 0, s, k_popcount)(bits, n, count_dev);
}

size_t sparse_workspace_bytes(size_t n) {
  return al(bitmap_words(n) * 8) + al(div_up(bitmap_words(n), kTileWords) * 8) + kWsAlign;
}

void sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out, void* ws,
                    cudaStream_t s) {
  if (n == 0) return;
  unsigned long long* prefix = static_cast<unsigned long long*>(ws);
  word_prefix(bits, n, prefix, s);
  (void)by_type(t, [&](auto et) {
    SCCL_LAUNCH(grid_for(bitmap_words(n)), kThreads, 0, s, k_compact<decltype(et)::value>)
    (bits, n, x, prefix, out);
  });
}

void sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                    ElemType t, void* ws, cudaStream_t s) {
  if (n == 0) return;
  unsigned long long* prefix = static_cast<unsigned long long*>(ws);
  word_prefix(bits, n, prefix, s);
  (void)by_type(t, [&](auto et) {
    SCCL_LAUNCH(grid_for(bitmap_words(n)), kThreads, 0, s, k_scatter<decltype(et)::value>)
    (bits, n, vals, scale, prefix, y);
  });
}

cudaError_t preload_sparse_kernels(size_t* max_local_bytes) {
  cudaError_t err = cudaSuccess;
  preload_one(k_bitmap_build<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_bitmap_build<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_bitmap_build<int(ElemType::kBf16)>, max_local_bytes, &err);
  preload_one(k_compact<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_compact<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_compact<int(ElemType::kBf16)>, max_local_bytes, &err);
  preload_one(k_scatter<int(ElemType::kF32)>, max_local_bytes, &err);
  preload_one(k_scatter<int(ElemType::kF16)>, max_local_bytes, &err);
  preload_one(k_scatter<int(ElemType::kBf16)>, max_local_bytes, &err);
  preload_one(k_or_words, max_local_bytes, &err);
  preload_one(k_popcount, max_local_bytes, &err);
  preload_one(k_tile_sums, max_local_bytes, &err);
  preload_one(k_scan_tiles, max_local_bytes, &err);
  preload_one(k_word_prefix, max_local_bytes, &err);
  return err;
}

}  // namespace sketchccl::kernels::cuda
