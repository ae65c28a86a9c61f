#include "src/coll/carry.h"

#include <cstring>

#include "kernels/sparse.h"

namespace sketchccl::coll {

Status SampleTrailer::place(const SampleCarry& sample, const RingPlan& plan, int nranks) {
  slices_ = plan.max_slices();
  const size_t cells = static_cast<size_t>(nranks) * static_cast<size_t>(slices_);
  first_.assign(cells, 0);
  count_.assign(cells, 0);
  // Chunks and their slices follow each other in element order: one pass over the bitmap.
  size_t seen = 0, next = 0;
  for (int c = 0; c < nranks; ++c) {
    for (int j = 0; j < slices_; ++j) {
      size_t off = 0, n = 0;
      plan.slice(c, j, &off, &n);
      if (n != 0 && off != next) {
        return Status(Code::kInternalError, "the carried sample: slices out of element order");
      }
      next = n == 0 ? next : off + n;
      first_[idx(c, j)] = seen;
      count_[idx(c, j)] = n == 0 ? 0 : kernels::bitmap_count_range(sample.bits, off, off + n);
      seen += count_[idx(c, j)];
    }
  }
  if (seen != sample.m) {
    return Status(Code::kInternalError, "the carried sample's size does not match the slices");
  }
  return Status::Ok();
}

void SampleTrailer::put(int c, int j, const float* values, uint8_t* msg,
                        size_t packet_bytes) const {
  const size_t k = count(c, j);
  if (k > 0) std::memcpy(msg + packet_bytes, values, 4 * k);
}

void SampleTrailer::get(int c, int j, const uint8_t* msg, size_t packet_bytes,
                        float* values) const {
  const size_t k = count(c, j);
  if (k > 0) std::memcpy(values, msg + packet_bytes, 4 * k);
}

}  // namespace sketchccl::coll
