// The two-shot schedule on device memory, on the CPU: a model device backend whose sums live only
// in the arrays it handed out, as a GPU's must, and the outputs the host run's bits.
#include <gtest/gtest.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include "kernels/codec_common.h"
#include "kernels/convert.h"
#include "src/backend/device_runtime.h"
#include "src/coll/accuracy.h"
#include "src/coll/allreduce.h"
#include "src/coll/ring_phase.h"
#include "src/coll/schedule_choice.h"
#include "tests/unit/coll/recording_transport.h"
#include "tests/unit/coll/two_shot_inputs.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::ElemType;
using testutil::call_args;
using testutil::inputs;
using testutil::RecordedRanks;
using testutil::settings_for;

// A device backend for the CPU: the host backend's kernels on memory it calls device memory, and
// the two-shot sums kept only in arrays it handed out (alloc_f32), as a GPU's must be.
class SumsOnlyInOwnMemory final : public backend::Backend {
 public:
  SumsOnlyInOwnMemory() : host_(backend::make_host_backend()) {}
  const char* name() const override { return "model"; }
  backend::MemoryType memory_type() const override { return backend::MemoryType::kDevice; }
  size_t packet_bytes(const kernels::CodecParams& p, size_t n) const override {
    return host_->packet_bytes(p, n);
  }
  Status encode(const kernels::CodecParams& p, const void* x, ElemType t, size_t n, void* pkt,
                size_t cap) override {
    return host_->encode(p, x, t, n, pkt, cap);
  }
  Status step(const kernels::CodecParams& p, const void* in, size_t in_bytes, const void* x,
              ElemType t, size_t n, void* out, size_t cap) override {
    return host_->step(p, in, in_bytes, x, t, n, out, cap);
  }
  Status decode(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y, ElemType t,
                size_t n, float scale, kernels::DecodeStats* stats) override {
    return host_->decode(p, pkt, bytes, y, t, n, scale, stats);
  }
  Status alloc_f32(size_t n, std::unique_ptr<backend::F32Array>* out) override {
    SCCL_RETURN_IF_ERROR(host_->alloc_f32(n, out));
    std::lock_guard<std::mutex> lock(mu_);
    arrays_.push_back({(*out)->data(), n});
    return Status::Ok();
  }
  Status ef_compensate(const void* x, ElemType t, size_t n, const float* residual,
                       float* out) override {
    return host_->ef_compensate(x, t, n, residual, out);
  }
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override {
    return host_->ef_update(comp, in, out, n, residual, sums);
  }
  bool sums() const override { return true; }
  Status zero_f32(float* a, size_t n) override {
    SCCL_RETURN_IF_ERROR(own(a, n));
    return host_->zero_f32(a, n);
  }
  Status load_sum(const void* x, ElemType t, size_t n, float* sum) override {
    SCCL_RETURN_IF_ERROR(own(sum, n));
    return host_->load_sum(x, t, n, sum);
  }
  Status decode_add(const kernels::CodecParams& p, const void* pkt, size_t bytes, float* sum,
                    size_t n) override {
    SCCL_RETURN_IF_ERROR(own(sum, n));
    return host_->decode_add(p, pkt, bytes, sum, n);
  }
  Status store_sum(const float* sum, size_t n, float scale, void* y, ElemType t) override {
    SCCL_RETURN_IF_ERROR(own(sum, n));
    return host_->store_sum(sum, n, scale, y, t);
  }
  Status bitmap_build(const void* x, ElemType t, size_t n, uint64_t* bits) override {
    return host_->bitmap_build(x, t, n, bits);
  }
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    return host_->bitmap_or(acc, other, n);
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    return host_->bitmap_popcount(bits, n, count);
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, ElemType t, float* out,
                        size_t* count) override {
    return host_->sparse_compact(bits, n, x, t, out, count);
  }
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        ElemType t, size_t* count) override {
    return host_->sparse_scatter(bits, n, vals, scale, y, t, count);
  }

 private:
  // An error unless [a, a + n) lies in one of this backend's arrays.
  Status own(const float* a, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : arrays_) {
      if (a >= r.first && a + n <= r.first + r.second) return Status::Ok();
    }
    return Status(Code::kInternalError, "an fp32 sum outside the backend's memory");
  }
  std::unique_ptr<backend::Backend> host_;
  std::mutex mu_;
  std::vector<std::pair<const float*, size_t>> arrays_;  // never freed before the test ends
};

class ModelDevice final : public backend::DeviceRuntime {
 public:
  Status make_gate(int, std::unique_ptr<backend::StreamGate>*) override {
    return Status(Code::kInternalError, "no gate in this test");
  }
  Status make_backend(int, std::unique_ptr<backend::Backend>* out) override {
    *out = std::make_unique<SumsOnlyInOwnMemory>();
    return Status::Ok();
  }
  Status synchronize(int, void*, double) override { return Status::Ok(); }
  backend::StreamMode mode(std::string*) override { return backend::StreamMode::kSynchronous; }
};

// The scheme on device memory: the sums live in the device backend's arrays, so a GPU's kernels
// can reach them; the outputs are the host run's bits (the same kernels here).
TEST(TwoShot, DeviceBuffersKeepTheSumsInTheBackendsMemory) {
  ModelDevice model;
  backend::set_device_runtime_for_test(&model);
  constexpr int p = 3;
  const size_t count = 6000 + 9;  // odd, and a multiple of P for the ReduceScatter
  const std::vector<std::vector<float>> x = inputs(p, count);
  for (bool scatter : {false, true}) {
    for (bool feedback : {false, true}) {
      SCOPED_TRACE(std::string(scatter ? "ReduceScatter" : "AllReduce") +
                   (feedback ? " with error feedback" : ""));
      const size_t out = scatter ? count / p : count;
      std::vector<std::vector<float>> y[2];
      uint64_t calls[2] = {0, 0};
      for (int dev = 0; dev < 2; ++dev) {
        RecordedRanks ranks(p, settings_for(CodecId::kQ4, Settings::Algo::kTwoShot, feedback), 30);
        y[dev].assign(p, std::vector<float>(out, -1.f));
        for (const Status& st : ranks.run(1, [&](int r) {
               const auto ru = static_cast<size_t>(r);
               AllReduceArgs a =
                   call_args(x[ru].data(), y[dev][ru].data(), count,
                             scatter ? CallKind::kReduceScatter : CallKind::kAllReduce);
               a.mem = dev == 1 ? backend::MemoryType::kDevice : backend::MemoryType::kHost;
               return a;
             })) {
          EXPECT_TRUE(st.ok()) << st.to_string();
        }
        for (int r = 0; r < p; ++r)
          calls[dev] +=
              ranks.engines[static_cast<size_t>(r)]->stats().by_codec["q4"].two_shot_calls;
      }
      EXPECT_EQ(calls[0], static_cast<uint64_t>(p));
      EXPECT_EQ(calls[1], static_cast<uint64_t>(p)) << "device buffers ran the ring";
      for (int r = 0; r < p; ++r) {
        const auto ru = static_cast<size_t>(r);
        EXPECT_EQ(std::memcmp(y[1][ru].data(), y[0][ru].data(), out * sizeof(float)), 0)
            << "rank " << r << ": device buffers differ from host buffers";
      }
    }
  }
  backend::set_device_runtime_for_test(nullptr);
}

}  // namespace
}  // namespace sketchccl::coll
