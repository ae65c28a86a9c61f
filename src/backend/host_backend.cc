// The host backend: every call is the kernels' CPU build, on the proxy thread; and
// make_backend, which picks the backend for a memory type.
#include <vector>

#include "kernels/convert.h"
#include "kernels/error_feedback.h"
#include "kernels/sparse.h"
#include "kernels/sum.h"
#include "src/backend/backend.h"
#include "src/backend/device_runtime.h"

namespace sketchccl::backend {
namespace {

class HostF32Array final : public F32Array {
 public:
  explicit HostF32Array(size_t n) : v_(n, 0.0f) {
    data_ = v_.data();
    size_ = n;
  }

 private:
  std::vector<float> v_;
};

class HostBackend final : public Backend {
 public:
  const char* name() const override { return "host"; }
  MemoryType memory_type() const override { return MemoryType::kHost; }

  size_t packet_bytes(const kernels::CodecParams& p, size_t n) const override {
    return kernels::packet_bytes(p, n);
  }
  Status encode(const kernels::CodecParams& p, const void* x, kernels::ElemType t, size_t n,
                void* pkt, size_t cap) override {
    return kernels::encode(p, x, t, n, pkt, cap);
  }
  Status step(const kernels::CodecParams& p, const void* in, size_t in_bytes, const void* x,
              kernels::ElemType t, size_t n, void* out, size_t cap) override {
    return kernels::step(p, in, in_bytes, x, t, n, out, cap);
  }
  Status decode(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y,
                kernels::ElemType t, size_t n, float scale, kernels::DecodeStats* stats) override {
    return kernels::decode(p, pkt, bytes, y, t, n, scale, stats);
  }
  Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) override {
    *out = std::make_unique<HostF32Array>(n);
    return Status::Ok();
  }
  Status ef_compensate(const void* x, kernels::ElemType t, size_t n, const float* residual,
                       float* out) override {
    kernels::ef_compensate(x, t, n, residual, out);
    return Status::Ok();
  }
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override {
    kernels::ef_update(comp, in, out, n, residual, sums);
    return Status::Ok();
  }
  bool sums() const override { return true; }
  Status load_sum(const void* x, kernels::ElemType t, size_t n, float* sum) override {
    kernels::load_f32(x, t, n, sum);
    return Status::Ok();
  }
  Status decode_add(const kernels::CodecParams& p, const void* pkt, size_t bytes, float* sum,
                    size_t n) override {
    return kernels::decode_add(p, pkt, bytes, sum, n);
  }
  Status store_sum(const float* sum, size_t n, float scale, void* y, kernels::ElemType t) override {
    kernels::store_f32(sum, n, scale, t, y);
    return Status::Ok();
  }
  Status bitmap_build(const void* x, kernels::ElemType t, size_t n, uint64_t* bits) override {
    kernels::bitmap_build(x, t, n, bits);
    return Status::Ok();
  }
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    kernels::bitmap_or(acc, other, n);
    return Status::Ok();
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    *count = kernels::bitmap_popcount(bits, n);
    return Status::Ok();
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, kernels::ElemType t,
                        float* out, size_t* count) override {
    const size_t m = kernels::sparse_compact(bits, n, x, t, out);
    if (count != nullptr) *count = m;
    return Status::Ok();
  }
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        kernels::ElemType t, size_t* count) override {
    const size_t m = kernels::sparse_scatter(bits, n, vals, scale, y, t);
    if (count != nullptr) *count = m;
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<HostBackend>();
}

Status make_backend(MemoryType mem, int device, std::unique_ptr<Backend>* out) {
  if (mem == MemoryType::kHost) {
    *out = make_host_backend();
    return Status::Ok();
  }
  return device_runtime().make_backend(device, out);
}

}  // namespace sketchccl::backend
