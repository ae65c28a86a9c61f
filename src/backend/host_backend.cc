// The host backend: every call is the kernels' CPU build, on the proxy thread; and
// make_backend, which picks the backend for a memory type.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/convert.h"
#include "kernels/error_feedback.h"
#include "kernels/sparse.h"
#include "kernels/sum.h"
#include "src/backend/backend.h"
#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"

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

// Packet memory is leased from the process's host packet pool (memory_pool.h) for as long as an
// operation holds it: a fresh block of tens of MiB (glibc maps every block above its 32 MiB
// threshold anew and unmaps it on free) costs a page fault and a zeroed page per 4 KiB, measured
// as much CPU as the codec's own work in a 64 MiB two-shot AllReduce; and communicators whose
// calls follow one another reuse the same blocks instead of each keeping its own.
class HostBackend final : public Backend {
 public:
  HostBackend() : pool_(host_packet_pool()) { pool_.add_user(); }
  ~HostBackend() override {
    leases_.clear();  // back to the pool before it may be trimmed
    pool_.remove_user();
  }
  HostBackend(const HostBackend&) = delete;
  HostBackend& operator=(const HostBackend&) = delete;

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
  void* alloc_packets(size_t bytes) override {
    PoolLease lease = pool_.take(bytes);
    if (!lease) return nullptr;
    void* p = lease.data();
    std::lock_guard<std::mutex> lock(mu_);
    leased_bytes_ += lease.capacity();
    peak_bytes_ = std::max(peak_bytes_, leased_bytes_);
    leases_.emplace(p, std::move(lease));
    return p;
  }
  void free_packets(void* p) override {
    PoolLease back;  // given back to the pool outside this backend's lock
    std::lock_guard<std::mutex> lock(mu_);
    auto it = leases_.find(p);
    if (it == leases_.end()) return;  // null, or not this backend's
    leased_bytes_ -= it->second.capacity();
    back = std::move(it->second);
    leases_.erase(it);
  }
  MemoryFigures memory_figures() const override {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryFigures f;
    f.packet_leased_bytes = leased_bytes_;
    f.packet_peak_bytes = peak_bytes_;
    return f;
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

 private:
  MemoryPool& pool_;
  mutable std::mutex mu_;  // leases and figures may be asked for from more than one thread
  std::unordered_map<void*, PoolLease> leases_;
  uint64_t leased_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
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
  (void)device;
  (void)out;
  // Device calls are staged on the caller's stream (device_staging.h): the engine sees host copies.
  return Status(Code::kInternalError, "no backend runs on device memory: device calls are staged");
}

}  // namespace sketchccl::backend
