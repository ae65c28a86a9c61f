#include "src/coll/gated_slice_ops.h"

namespace sketchccl::coll {

GatedSliceOps::GatedSliceOps(SliceOps& inner, backend::StageGate& gate, size_t esz,
                             size_t out_first, CallSample* sample, bool outputs)
    : inner_(inner),
      gate_(gate),
      esz_(esz),
      out_first_(out_first),
      sample_(sample),
      outputs_(outputs) {}

Status GatedSliceOps::need(size_t offset, size_t n) {
  SCCL_RETURN_IF_ERROR(gate_.need_input(offset * esz_, (offset + n) * esz_));
  return sample_ != nullptr ? sample_->fill(offset, n) : Status::Ok();
}

void GatedSliceOps::final(size_t offset, size_t n) {
  if (!outputs_ || n == 0) return;
  gate_.output_final((offset - out_first_) * esz_, (offset - out_first_ + n) * esz_);
}

Status GatedSliceOps::settle() {
  bool done = false;
  SCCL_RETURN_IF_ERROR(inner_.flush(&done));
  if (!done) return Status::Ok();
  for (const Range& r : decoding_)
    final(r.offset, r.n);
  decoding_.clear();
  return Status::Ok();
}

Status GatedSliceOps::encode(size_t offset, size_t n, int ring_step, void* pkt, size_t cap) {
  SCCL_RETURN_IF_ERROR(need(offset, n));
  return inner_.encode(offset, n, ring_step, pkt, cap);
}

Status GatedSliceOps::step(size_t offset, size_t n, int ring_step, const void* in, size_t in_bytes,
                           void* out, size_t cap) {
  SCCL_RETURN_IF_ERROR(need(offset, n));
  return inner_.step(offset, n, ring_step, in, in_bytes, out, cap);
}

Status GatedSliceOps::encode_start(size_t offset, size_t n, int ring_step, void* pkt, size_t cap,
                                   uint64_t* ticket) {
  SCCL_RETURN_IF_ERROR(need(offset, n));
  return inner_.encode_start(offset, n, ring_step, pkt, cap, ticket);
}

Status GatedSliceOps::step_start(size_t offset, size_t n, int ring_step, const void* in,
                                 size_t in_bytes, void* out, size_t cap, uint64_t* ticket) {
  SCCL_RETURN_IF_ERROR(need(offset, n));
  return inner_.step_start(offset, n, ring_step, in, in_bytes, out, cap, ticket);
}

Status GatedSliceOps::decode_start(size_t offset, size_t n, const void* pkt, size_t bytes) {
  SCCL_RETURN_IF_ERROR(inner_.decode_start(offset, n, pkt, bytes));
  decoding_.push_back(Range{offset, n});
  // A host decode is complete when it returns: its part of the output is final at once.
  return settle();
}

Status GatedSliceOps::flush(bool* done) {
  SCCL_RETURN_IF_ERROR(settle());
  *done = decoding_.empty();
  return Status::Ok();
}

Status GatedSliceOps::load_own(size_t offset, size_t n, float* sum) {
  SCCL_RETURN_IF_ERROR(need(offset, n));
  return inner_.load_own(offset, n, sum);
}

Status GatedSliceOps::store_sum(size_t offset, size_t n, const float* sum) {
  SCCL_RETURN_IF_ERROR(inner_.store_sum(offset, n, sum));
  final(offset, n);
  return Status::Ok();
}

}  // namespace sketchccl::coll
