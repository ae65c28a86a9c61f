// The host backend: every call is the kernels' CPU build, on the proxy thread; and
// make_backend, which picks the backend for a memory type.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
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

// Packet memory kept across operations. A fresh block of tens of MiB (glibc maps every block
// above its 32 MiB threshold anew and unmaps it on free) costs a page fault and a zeroed page per
// 4 KiB, measured as much CPU as the codec's own work in a 64 MiB two-shot AllReduce; so freed
// blocks of 1 MiB and more are kept (the last kKeep) and handed out again.
class PacketPool {
 public:
  static constexpr size_t kKeep = 4;
  static constexpr size_t kMinKept = size_t(1) << 20;

  PacketPool() = default;
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;
  ~PacketPool() {
    for (const Block& b : spare_)
      std::free(b.p);
  }

  void* take(size_t bytes) {
    const size_t want = (std::max<size_t>(bytes, 1) + 63) & ~size_t(63);
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest kept block that fits, if it is not over 4 times too large (a small request
    // would otherwise hold a block a later large one needs).
    size_t best = spare_.size();
    for (size_t i = 0; i < spare_.size(); ++i) {
      const size_t cap = spare_[i].cap;
      if (cap >= want && cap / 4 <= want && (best == spare_.size() || cap < spare_[best].cap)) {
        best = i;
      }
    }
    if (best < spare_.size()) {
      const Block b = spare_[best];
      spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(best));
      live_[b.p] = b.cap;
      return b.p;
    }
    void* p = std::aligned_alloc(64, want);
    if (p != nullptr) live_[p] = want;
    return p;
  }

  void give(void* p) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    const size_t cap = it == live_.end() ? 0 : it->second;
    if (it != live_.end()) live_.erase(it);
    if (cap < kMinKept) {
      std::free(p);
      return;
    }
    spare_.push_back({p, cap});
    if (spare_.size() > kKeep) {  // the oldest goes
      std::free(spare_.front().p);
      spare_.erase(spare_.begin());
    }
  }

 private:
  struct Block {
    void* p;
    size_t cap;
  };
  std::mutex mu_;
  std::vector<Block> spare_;
  std::unordered_map<void*, size_t> live_;
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
  void* alloc_packets(size_t bytes) override { return packets_.take(bytes); }
  void free_packets(void* p) override { packets_.give(p); }
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
  PacketPool packets_;
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
