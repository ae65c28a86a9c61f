#include "src/backend/warm_up.h"

#include <vector>

#include "kernels/sparse.h"

namespace sketchccl::backend {

Status warm_up_backend(Backend& be, void* x, void* y) {
  using kernels::CodecParams;
  using kernels::ElemType;
  constexpr size_t n = kWarmUpElems;
  std::vector<uint8_t> pkt, out;
  std::vector<uint64_t> bits(kernels::bitmap_bytes(n) / 8 + 1);
  std::vector<float> vals(n);
  kernels::DecodeStats stats;
  for (ElemType t : {ElemType::kF32, ElemType::kBf16, ElemType::kF16}) {
    for (const kernels::CodecInfo& c : kernels::kCodecs) {
      if (c.family == kernels::CodecFamily::kSparse) continue;  // its phases follow, below
      CodecParams p;
      p.codec = c.id;
      p.seed = 1;
      p.call = 1;
      // Enough counters to peel every position (the support is all of them).
      p.s2_counters = kernels::s2_counters_for_support(n, p.s2_rows, 1.5);
      CodecParams p1 = p;
      p1.step = 1;
      const size_t bytes = be.packet_bytes(p, n);
      pkt.assign(bytes, 0);
      out.assign(bytes, 0);
      SCCL_RETURN_IF_ERROR(be.encode(p, x, t, n, pkt.data(), bytes));
      SCCL_RETURN_IF_ERROR(be.step(p1, pkt.data(), bytes, x, t, n, out.data(), bytes));
      SCCL_RETURN_IF_ERROR(be.decode(p1, out.data(), bytes, y, t, n, 0.5f, &stats));
      SCCL_RETURN_IF_ERROR(be.decode(p1, out.data(), bytes, y, t, n, 1.0f, nullptr));
    }
    size_t m = 0;
    SCCL_RETURN_IF_ERROR(be.bitmap_build(x, t, n, bits.data()));
    SCCL_RETURN_IF_ERROR(be.sparse_compact(bits.data(), n, x, t, vals.data(), &m));
    SCCL_RETURN_IF_ERROR(be.sparse_scatter(bits.data(), n, vals.data(), 1.0f, y, t, &m));
  }
  // Error feedback on the backend's fp32 arrays, compensation for every element type.
  std::unique_ptr<F32Array> res, comp;
  SCCL_RETURN_IF_ERROR(be.alloc_f32(n, &res));
  SCCL_RETURN_IF_ERROR(be.alloc_f32(n, &comp));
  for (ElemType t : {ElemType::kF32, ElemType::kBf16, ElemType::kF16})
    SCCL_RETURN_IF_ERROR(be.ef_compensate(x, t, n, res->data(), comp->data()));
  kernels::EfSums sums;
  const float* yf = static_cast<const float*>(y);
  SCCL_RETURN_IF_ERROR(be.ef_update(comp->data(), comp->data(), yf, n, res->data(), &sums));
  SCCL_RETURN_IF_ERROR(be.ef_update(comp->data(), nullptr, yf, n, res->data(), &sums));
  if (!be.sums()) return Status::Ok();
  // The two-shot scheme's sums, every element type in and out.
  CodecParams p;
  p.codec = kernels::CodecId::kQ8;
  p.seed = 1;
  p.call = 1;
  pkt.assign(be.packet_bytes(p, n), 0);
  SCCL_RETURN_IF_ERROR(be.encode(p, x, ElemType::kF32, n, pkt.data(), pkt.size()));
  for (ElemType t : {ElemType::kF32, ElemType::kBf16, ElemType::kF16}) {
    SCCL_RETURN_IF_ERROR(be.zero_f32(comp->data(), n));
    SCCL_RETURN_IF_ERROR(be.load_sum(x, t, n, comp->data()));
    SCCL_RETURN_IF_ERROR(be.decode_add(p, pkt.data(), pkt.size(), comp->data(), n));
    SCCL_RETURN_IF_ERROR(be.store_sum(comp->data(), n, 0.5f, y, t));
  }
  return Status::Ok();
}

}  // namespace sketchccl::backend
