#include "kernels/error_feedback.h"

#include "kernels/error_feedback_impl.h"

namespace sketchccl::kernels {

void ef_compensate(const void* x, ElemType t, size_t n, const float* residual, float* out) {
  detail::for_elem_type(t, [&](auto et) {
    for (size_t i = 0; i < n; ++i)
      out[i] = detail::ef_compensated<decltype(et)::value>(x, i, residual);
  });
}

void ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
               EfSums* sums) {
  double in_sq = 0, res_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = detail::ef_residual(in != nullptr ? in[i] : 0.0f, comp[i], out[i]);
    residual[i] = e;
    in_sq += static_cast<double>(comp[i]) * comp[i];
    res_sq += static_cast<double>(e) * e;
  }
  sums->input_sq = in_sq;
  sums->residual_sq = res_sq;
}

}  // namespace sketchccl::kernels
