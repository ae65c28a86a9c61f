// The host backend: every call is the kernels' CPU build, on the proxy thread.
#include "backend/backend.h"
#include "kernels/convert.h"
#include "kernels/sparse.h"

namespace sketchccl::backend {
namespace {

class HostBackend final : public Backend {
 public:
  const char* name() const override { return "host"; }

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
  void load_f32(const void* x, kernels::ElemType t, size_t n, float* out) override {
    kernels::load_f32(x, t, n, out);
  }
  void bitmap_build(const void* x, kernels::ElemType t, size_t n, uint64_t* bits) override {
    kernels::bitmap_build(x, t, n, bits);
  }
  void bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    kernels::bitmap_or(acc, other, n);
  }
  size_t bitmap_popcount(const uint64_t* bits, size_t n) override {
    return kernels::bitmap_popcount(bits, n);
  }
  size_t sparse_compact(const uint64_t* bits, size_t n, const void* x, kernels::ElemType t,
                        float* out) override {
    return kernels::sparse_compact(bits, n, x, t, out);
  }
  size_t sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        kernels::ElemType t) override {
    return kernels::sparse_scatter(bits, n, vals, scale, y, t);
  }
};

}  // namespace

std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<HostBackend>();
}

}  // namespace sketchccl::backend
