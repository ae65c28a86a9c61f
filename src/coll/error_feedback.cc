#include "src/coll/error_feedback.h"

#include <cstring>
#include <utility>

namespace sketchccl::coll {

using kernels::CodecParams;
using kernels::ElemType;

Status buffer_residual(backend::Backend& be, size_t count, BufferState* state, float** residual) {
  if (!state->residual || state->residual->size() != count ||
      state->residual_mem != be.memory_type() || state->residual_generation != state->generation) {
    std::unique_ptr<backend::F32Array> r;
    SCCL_RETURN_IF_ERROR(be.alloc_f32(count, &r));
    state->residual = std::move(r);
    state->residual_mem = be.memory_type();
    state->residual_generation = state->generation;
  }
  *residual = state->residual->data();
  return Status::Ok();
}

Status FeedbackSliceOps::encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) {
  const CodecParams p = inner_.params(offset, n, static_cast<uint32_t>(ring_step));
  float* x = nullptr;
  SCCL_RETURN_IF_ERROR(compensated(offset, n, &x));
  SCCL_RETURN_IF_ERROR(be_.encode(p, x, ElemType::kF32, n, pkt, cap));
  if (kind_ == Feedback::kAtDecode) return keep_input(offset, n, x);
  // residual = (x + r) - decode(encode(x + r))
  SCCL_RETURN_IF_ERROR(scratch(&tmp_, n));
  SCCL_RETURN_IF_ERROR(be_.decode(p, pkt, cap, tmp_->data(), ElemType::kF32, n, 1.0f, nullptr));
  return keep_residual(offset, n, x, tmp_->data(), nullptr);
}

Status FeedbackSliceOps::step(size_t offset, size_t n, int ring_step, const void* in,
                              size_t in_bytes, void* out, size_t cap) {
  const CodecParams p = inner_.params(offset, n, static_cast<uint32_t>(ring_step));
  float* x = nullptr;
  SCCL_RETURN_IF_ERROR(compensated(offset, n, &x));
  SCCL_RETURN_IF_ERROR(be_.step(p, in, in_bytes, x, ElemType::kF32, n, out, cap));
  if (kind_ == Feedback::kAtDecode) return keep_input(offset, n, x);
  // residual = (decode(in) + x + r) - decode(out): the error this step added.
  const CodecParams pin = inner_.params(offset, n, static_cast<uint32_t>(ring_step - 1));
  SCCL_RETURN_IF_ERROR(scratch(&tmp_, n));
  SCCL_RETURN_IF_ERROR(scratch(&tmp_in_, n));
  SCCL_RETURN_IF_ERROR(
      be_.decode(pin, in, in_bytes, tmp_in_->data(), ElemType::kF32, n, 1.0f, nullptr));
  SCCL_RETURN_IF_ERROR(be_.decode(p, out, cap, tmp_->data(), ElemType::kF32, n, 1.0f, nullptr));
  return keep_residual(offset, n, x, tmp_->data(), tmp_in_->data());
}

Status FeedbackSliceOps::load_own(size_t offset, size_t n, float* sum) {
  float* x = nullptr;
  SCCL_RETURN_IF_ERROR(compensated(offset, n, &x));
  SCCL_RETURN_IF_ERROR(be_.copy(sum, x, n * sizeof(float)));  // both in the backend's memory
  // Summed exact: nothing of it is lost, so the residual is spent (x - x, and 0 for NaN/Inf).
  kernels::EfSums sums;
  SCCL_RETURN_IF_ERROR(be_.ef_update(x, nullptr, x, n, residual_ + offset, &sums));
  cs_->ef_input_sq += sums.input_sq;
  return Status::Ok();
}

Status FeedbackSliceOps::encode_sum(size_t offset, size_t n, int ring_step, const float* sum,
                                    void* pkt, size_t cap) {
  SCCL_RETURN_IF_ERROR(inner_.encode_sum(offset, n, ring_step, sum, pkt, cap));
  // residual = sum - decode(encode(sum)): the requantization's error, this rank's to put back.
  const CodecParams p = inner_.params(offset, n, static_cast<uint32_t>(ring_step));
  SCCL_RETURN_IF_ERROR(scratch(&tmp_, n));
  SCCL_RETURN_IF_ERROR(be_.decode(p, pkt, cap, tmp_->data(), ElemType::kF32, n, 1.0f, nullptr));
  return keep_residual(offset, n, sum, tmp_->data(), nullptr);
}

Status FeedbackSliceOps::scratch(std::unique_ptr<backend::F32Array>* a, size_t n) {
  if (*a && (*a)->size() >= n) return Status::Ok();
  a->reset();
  return be_.alloc_f32(n, a);
}

Status FeedbackSliceOps::compensated(size_t offset, size_t n, float** x) {
  SCCL_RETURN_IF_ERROR(scratch(&comp_, n));
  SCCL_RETURN_IF_ERROR(
      be_.ef_compensate(inner_.input(offset), inner_.type(), n, residual_ + offset, comp_->data()));
  *x = comp_->data();
  return Status::Ok();
}

Status FeedbackSliceOps::keep_input(size_t offset, size_t n, const float* x) {
  SCCL_RETURN_IF_ERROR(scratch(&zeros_, n));  // zeroed when made, never written
  kernels::EfSums sums;
  SCCL_RETURN_IF_ERROR(be_.ef_update(x, nullptr, zeros_->data(), n, residual_ + offset, &sums));
  cs_->ef_input_sq += sums.input_sq;
  return Status::Ok();
}

Status FeedbackSliceOps::keep_residual(size_t offset, size_t n, const float* x, const float* out,
                                       const float* in) {
  kernels::EfSums sums;
  SCCL_RETURN_IF_ERROR(be_.ef_update(x, in, out, n, residual_ + offset, &sums));
  cs_->ef_input_sq += sums.input_sq;
  cs_->ef_residual_sq += sums.residual_sq;
  return Status::Ok();
}

}  // namespace sketchccl::coll
