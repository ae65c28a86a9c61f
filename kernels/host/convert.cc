#include "kernels/convert.h"

#include "kernels/codec_common.h"

namespace sketchccl::kernels {
namespace {

template <int ET>
void load_typed(const void* x, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i)
    out[i] = detail::load_elem<ET>(x, i);
}
template <int ET>
void store_typed(const float* v, size_t n, float scale, void* y) {
  for (size_t i = 0; i < n; ++i)
    detail::store_elem<ET>(y, i, v[i] * scale);
}

}  // namespace

void load_f32(const void* x, ElemType t, size_t n, float* out) {
  switch (t) {
    case ElemType::kF32:
      load_typed<int(ElemType::kF32)>(x, n, out);
      return;
    case ElemType::kF16:
      load_typed<int(ElemType::kF16)>(x, n, out);
      return;
    case ElemType::kBf16:
      load_typed<int(ElemType::kBf16)>(x, n, out);
      return;
  }
}

void store_f32(const float* v, size_t n, float scale, ElemType t, void* y) {
  switch (t) {
    case ElemType::kF32:
      store_typed<int(ElemType::kF32)>(v, n, scale, y);
      return;
    case ElemType::kF16:
      store_typed<int(ElemType::kF16)>(v, n, scale, y);
      return;
    case ElemType::kBf16:
      store_typed<int(ElemType::kBf16)>(v, n, scale, y);
      return;
  }
}

}  // namespace sketchccl::kernels
