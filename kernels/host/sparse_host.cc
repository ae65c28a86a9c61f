// CPU build of the sparse codec's helpers (kernels/sparse.h).
#include "kernels/sparse.h"

#include <cstring>

#include "kernels/codec_common.h"
#include "kernels/host/cpu_path.h"

namespace sketchccl::kernels {

using detail::bitmap_words;
using detail::load_elem;
using detail::store_elem;

namespace {

// Word w of an n-element bitmap with the bits at and above n cleared.
inline uint64_t word(const uint64_t* bits, size_t n, size_t w) {
  uint64_t v = bits[w];
  if (w == bitmap_words(n) - 1 && (n & 63)) v &= (1ull << (n & 63)) - 1;
  return v;
}

// The engine validates types before it calls here: an unknown one does nothing.
template <typename F>
void by_type(ElemType t, F&& f) {
  (void)detail::for_elem_type(t, f);
}

}  // namespace

size_t bitmap_bytes(size_t n) {
  return bitmap_words(n) * 8;
}

void bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) {
  by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    size_t w = 0;
    if constexpr (ET == int(ElemType::kF32)) {  // whole words by the CPU path's compares
      w = n / 64;
      detail::cpu_nonzero_words(static_cast<const float*>(x), w, bits);
    }
    for (; w < bitmap_words(n); ++w) {
      uint64_t v = 0;
      size_t base = w * 64, cnt = n - base < 64 ? n - base : 64;
      for (size_t j = 0; j < cnt; ++j)
        v |= uint64_t(load_elem<ET>(x, base + j) != 0.0f) << j;
      bits[w] = v;
    }
  });
}

void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) {
  for (size_t w = 0; w < bitmap_words(n); ++w)
    acc[w] |= other[w];
}

size_t bitmap_popcount(const uint64_t* bits, size_t n) {
  size_t c = 0;
  for (size_t w = 0; w < bitmap_words(n); ++w)
    c += size_t(__builtin_popcountll(word(bits, n, w)));
  return c;
}

size_t bitmap_count_range(const uint64_t* bits, size_t begin, size_t end) {
  auto bit = [bits](size_t i) { return static_cast<size_t>((bits[i / 64] >> (i % 64)) & 1u); };
  size_t n = 0, i = begin;
  for (; i < end && i % 64 != 0; ++i)
    n += bit(i);
  for (; i + 64 <= end; i += 64)
    n += static_cast<size_t>(__builtin_popcountll(bits[i / 64]));
  for (; i < end; ++i)
    n += bit(i);
  return n;
}

size_t sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out) {
  size_t k = 0;
  by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    for (size_t w = 0; w < bitmap_words(n); ++w) {
      uint64_t v = word(bits, n, w);
      while (v) {
        out[k++] = load_elem<ET>(x, w * 64 + size_t(__builtin_ctzll(v)));
        v &= v - 1;
      }
    }
  });
  return k;
}

size_t sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                      ElemType t) {
  size_t k = 0;
  by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    size_t w = 0;
    if constexpr (ET == int(ElemType::kF32)) {  // whole words by the CPU path's expands
      w = n / 64;
      k = detail::cpu_scatter_words(bits, w, vals, scale, static_cast<float*>(y));
    }
    for (; w < bitmap_words(n); ++w) {
      uint64_t v = word(bits, n, w);
      size_t base = w * 64, cnt = n - base < 64 ? n - base : 64;
      for (size_t j = 0; j < cnt; ++j) {
        float o = 0.0f;
        if ((v >> j) & 1) o = vals[k++] * scale;
        store_elem<ET>(y, base + j, o);
      }
    }
  });
  return k;
}

}  // namespace sketchccl::kernels
