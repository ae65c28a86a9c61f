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

// Exclusive prefix of per-word popcounts, by one block (words are few: n / 64).
__global__ void k_word_prefix(const uint64_t* bits, size_t n, unsigned long long* prefix) {
  __shared__ unsigned long long part[kThreads];
  const size_t words = bitmap_words(n);
  const size_t per = div_up(words, kThreads);
  const size_t lo = threadIdx.x * per, hi = lo + per < words ? lo + per : words;
  unsigned long long s = 0;
  for (size_t w = lo; w < hi; ++w)
    s += __popcll(masked_word(bits, n, w));
  part[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long acc = 0;
    for (int t = 0; t < kThreads; ++t) {
      unsigned long long v = part[t];
      part[t] = acc;
      acc += v;
    }
  }
  __syncthreads();
  s = part[threadIdx.x];
  for (size_t w = lo; w < hi; ++w) {
    prefix[w] = s;
    s += __popcll(masked_word(bits, n, w));
  }
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
    k_bitmap_build<decltype(et)::value><<<grid_for(bitmap_words(n)), kThreads, 0, s>>>(x, n, bits);
  });
}

void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n, cudaStream_t s) {
  if (n == 0) return;
  k_or_words<<<grid_for(bitmap_words(n)), kThreads, 0, s>>>(acc, other, bitmap_words(n), nullptr);
}

void bitmap_popcount(const uint64_t* bits, size_t n, unsigned long long* count_dev,
                     cudaStream_t s) {
  cudaMemsetAsync(count_dev, 0, sizeof(*count_dev), s);
  if (n == 0) return;
  k_popcount<<<grid_for(bitmap_words(n)), kThreads, 0, s>>>(bits, n, count_dev);
}

size_t sparse_workspace_bytes(size_t n) {
  return al(bitmap_words(n) * 8) + kWsAlign;
}

void sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out, void* ws,
                    cudaStream_t s) {
  if (n == 0) return;
  unsigned long long* prefix = static_cast<unsigned long long*>(ws);
  k_word_prefix<<<1, kThreads, 0, s>>>(bits, n, prefix);
  (void)by_type(t, [&](auto et) {
    k_compact<decltype(et)::value>
        <<<grid_for(bitmap_words(n)), kThreads, 0, s>>>(bits, n, x, prefix, out);
  });
}

void sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                    ElemType t, void* ws, cudaStream_t s) {
  if (n == 0) return;
  unsigned long long* prefix = static_cast<unsigned long long*>(ws);
  k_word_prefix<<<1, kThreads, 0, s>>>(bits, n, prefix);
  (void)by_type(t, [&](auto et) {
    k_scatter<decltype(et)::value>
        <<<grid_for(bitmap_words(n)), kThreads, 0, s>>>(bits, n, vals, scale, prefix, y);
  });
}

}  // namespace sketchccl::kernels::cuda
