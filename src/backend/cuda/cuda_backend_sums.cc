// The CUDA backend's error feedback, the two-shot scheme's fp32 sums and the sparse helpers
// (bitmaps, compaction, scatter): device arrays on the main stream, bitmaps and values in host
// memory.
#include "src/backend/cuda/cuda_backend_impl.h"

#if SKETCHCCL_HAVE_CUDA
namespace sketchccl::backend::cuda_impl {

Status CudaBackendImpl::ef_compensate(const void* x, ElemType t, size_t n, const float* residual,
                                      float* out) {
  main_dirty_ = true;  // the next lane work reads `out`
  return kc::ef_compensate(x, t, n, residual, out, stream_);
}

Status CudaBackendImpl::ef_update(const float* comp, const float* in, const float* out, size_t n,
                                  float* residual, kernels::EfSums* sums) {
  SCCL_RETURN_IF_ERROR(ensure(ef_sums_, 2 * sizeof(double)));
  auto* dsums = reinterpret_cast<double*>(ef_sums_.p);
  SCCL_RETURN_IF_ERROR(kc::ef_update(comp, in, out, n, residual, dsums, stream_));
  auto* hsums = reinterpret_cast<double*>(small_.p + kEfSumsOffset);
  SCCL_CUDA_RETURN(
      cudaMemcpyAsync(hsums, dsums, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream_),
      "error feedback sums to host");
  SCCL_RETURN_IF_ERROR(sync(stream_, "error feedback"));
  sums->input_sq = hsums[0];
  sums->residual_sq = hsums[1];
  return Status::Ok();
}

Status CudaBackendImpl::zero_f32(float* a, size_t n) {
  if (n == 0) return Status::Ok();
  main_dirty_ = true;  // a later encode on a lane may read it
  SCCL_CUDA_RETURN(cudaMemsetAsync(a, 0, n * sizeof(float), stream_), "cudaMemsetAsync");
  return Status::Ok();
}

Status CudaBackendImpl::load_sum(const void* x, ElemType t, size_t n, float* sum) {
  main_dirty_ = true;
  return kc::load_sum(x, t, n, sum, stream_);
}

Status CudaBackendImpl::decode_add(const CodecParams& p, const void* pkt, size_t bytes, float* sum,
                                   size_t n) {
  if (n == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(ensure(sum_tmp_, n * sizeof(float)));
  auto* tmp = reinterpret_cast<float*>(sum_tmp_.p);
  SCCL_RETURN_IF_ERROR(queue_decode(p, pkt, bytes, tmp, ElemType::kF32, n, 1.0f, nullptr));
  int* verdict = reinterpret_cast<int*>(small_.p + kVerdictOffset);
  SCCL_CUDA_RETURN(cudaMemcpyAsync(verdict, ws_.p, sizeof(int), cudaMemcpyDeviceToHost, stream_),
                   "verdict to host");
  SCCL_RETURN_IF_ERROR(kc::add_sum(tmp, n, sum, stream_));
  SCCL_RETURN_IF_ERROR(sync(stream_, "decode of a contribution into the fp32 sum"));
  return kc::verdict_status(*verdict);
}

Status CudaBackendImpl::store_sum(const float* sum, size_t n, float scale, void* y, ElemType t) {
  if (n == 0) return Status::Ok();
  main_dirty_ = true;
  SCCL_RETURN_IF_ERROR(kc::store_sum(sum, n, scale, t, y, stream_));
  return sync(stream_, "store of the reduced chunk");
}

Status CudaBackendImpl::bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) {
  const size_t bytes = kernels::bitmap_bytes(n);
  if (n == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(ensure(bits_, bytes));
  kc::bitmap_build(x, t, n, reinterpret_cast<uint64_t*>(bits_.p), stream_);
  SCCL_CUDA_RETURN(cudaGetLastError(), "bitmap_build launch");
  // Words covering the first n elements: bitmap_build writes exactly these on the host too.
  SCCL_RETURN_IF_ERROR(to_host(bits, bits_.p, bytes, stream_, "bitmap copy"));
  SCCL_RETURN_IF_ERROR(sync(stream_, "bitmap_build"));
  return Status::Ok();
}

Status CudaBackendImpl::sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t,
                                       float* out, size_t* count) {
  const size_t m = kernels::bitmap_popcount(bits, n);
  if (count != nullptr) *count = 0;
  if (n == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(to_device_bits(bits, n));
  SCCL_RETURN_IF_ERROR(ensure(vals_, m * sizeof(float) + 4));
  SCCL_RETURN_IF_ERROR(ensure_ws(kc::sparse_workspace_bytes(n)));
  kc::sparse_compact(reinterpret_cast<const uint64_t*>(bits_.p), n, x, t,
                     reinterpret_cast<float*>(vals_.p), ws_.p, stream_);
  SCCL_CUDA_RETURN(cudaGetLastError(), "sparse_compact launch");
  SCCL_RETURN_IF_ERROR(to_host(out, vals_.p, m * sizeof(float), stream_, "sparse values to host"));
  SCCL_RETURN_IF_ERROR(sync(stream_, "sparse_compact"));
  if (count != nullptr) *count = m;
  return Status::Ok();
}

Status CudaBackendImpl::sparse_scatter(const uint64_t* bits, size_t n, const float* vals,
                                       float scale, void* y, ElemType t, size_t* count) {
  const size_t m = kernels::bitmap_popcount(bits, n);
  if (count != nullptr) *count = 0;
  if (n == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(to_device_bits(bits, n));
  SCCL_RETURN_IF_ERROR(ensure(vals_, m * sizeof(float) + 4));
  SCCL_RETURN_IF_ERROR(ensure_ws(kc::sparse_workspace_bytes(n)));
  SCCL_RETURN_IF_ERROR(
      to_device(vals_.p, vals, m * sizeof(float), stream_, "sparse values to device"));
  kc::sparse_scatter(reinterpret_cast<const uint64_t*>(bits_.p), n,
                     reinterpret_cast<const float*>(vals_.p), scale, y, t, ws_.p, stream_);
  SCCL_CUDA_RETURN(cudaGetLastError(), "sparse_scatter launch");
  SCCL_RETURN_IF_ERROR(sync(stream_, "sparse_scatter"));
  if (count != nullptr) *count = m;
  return Status::Ok();
}

}  // namespace sketchccl::backend::cuda_impl

#endif  // SKETCHCCL_HAVE_CUDA
