// The CUDA backend (src/backend/cuda) against the host backend, and the stream gate. Suite
// 'gpu': every test needs a device and skips itself without one (GTEST_SKIP; then the binary
// exits 77, Meson's SKIP). The checks that need no device are in nodevice_test.cc.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/codec.h"
#include "kernels/convert.h"
#include "kernels/error_feedback.h"
#include "kernels/sparse.h"
#include "src/backend/backend.h"
#include "src/backend/cuda/cuda_backend.h"
#include "src/backend/cuda/stream_gate.h"
#include "src/backend/cuda_query.h"
#include "src/coll/allreduce.h"
#include "src/coll/work.h"
#include "tests/gpu/ef_reference.h"
#include "tests/gpu/have_device.h"
#include "tests/gpu/test_kernels.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::backend {
namespace {

using gpu_ref::decoded_with_non_finite;
using gpu_ref::narrow;
using gpu_ref::reference_ef_update;
using gpu_ref::same_bits;
using gpu_ref::user_bytes;
using kernels::CodecId;
using kernels::CodecParams;
using kernels::DecodeStats;
using kernels::ElemType;
using kernels::testing::Dist;
using kernels::testing::make_data;
using kernels::testing::nmse;
using kernels::testing::Packet;
using kernels::testing::params_for;

using sketchccl::gpu_test::have_device;

#define SKIP_WITHOUT_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"

// Device memory for a test, freed at scope end.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T>
  T* as() {
    return static_cast<T*>(p);
  }
};

void put(void* d, const void* h, size_t b) {
  ASSERT_EQ(cudaMemcpy(d, h, b, cudaMemcpyHostToDevice), cudaSuccess);
}
void get(void* h, const void* d, size_t b) {
  ASSERT_EQ(cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost), cudaSuccess);
}

struct Case {
  CodecId codec;
  ElemType type;
  size_t n;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const char* t = i.param.type == ElemType::kF32   ? "f32"
                  : i.param.type == ElemType::kF16 ? "f16"
                                                   : "bf16";
  return std::string(kernels::codec_name(i.param.codec)) + "_" + t + "_" +
         std::to_string(i.param.n);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (CodecId c : kernels::testing::all_codecs()) {
    for (size_t n : {size_t(1), size_t(3 * 256 + 17), size_t(262144 + 5)})
      v.push_back({c, ElemType::kF32, n});
    v.push_back({c, ElemType::kF16, 4099});
    v.push_back({c, ElemType::kBf16, 4099});
  }
  return v;
}

class CudaBackendCodec : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    ASSERT_TRUE(make_cuda_backend(0, &gpu_).ok());
    cpu_ = make_host_backend();
  }
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
};

// encode(a) -> step(., b) -> decode on both backends, same inputs and parameters. The kernels
// are built without FMA contraction, so packets of the casts and q* are bit-identical and decode
// to the same values; CASQ's bucket means and s2's counters are fp64 sums formed by atomics, so
// those agree to rounding (docs/codecs.md), and each path decodes the other's packets alike.
TEST_P(CudaBackendCodec, EncodeStepDecodeMatchTheHostBackend) {
  const Case c = GetParam();
  const size_t n = c.n;
  const bool sparse_data = c.codec == CodecId::kS2;
  std::vector<float> a = make_data(sparse_data ? Dist::kSparse10 : Dist::kLaplace, n, 1);
  std::vector<float> b = make_data(sparse_data ? Dist::kSparse10 : Dist::kLaplace, n, 2);
  const size_t esz = kernels::elem_size(c.type);
  std::vector<uint16_t> a16, b16;
  const void* ha = a.data();
  const void* hb = b.data();
  if (c.type != ElemType::kF32) {
    a16 = narrow(a, c.type);
    b16 = narrow(b, c.type);
    ha = a16.data();
    hb = b16.data();
  }
  CodecParams p = params_for(c.codec, 2 * n / 10 + 1);
  CodecParams p1 = p;
  p1.step = 1;
  const size_t bytes = cpu_->packet_bytes(p, n);
  ASSERT_EQ(gpu_->packet_bytes(p, n), bytes);

  Packet c0(bytes), c1(bytes), g0(bytes), g1(bytes);
  ASSERT_TRUE(cpu_->encode(p, ha, c.type, n, c0.data(), bytes).ok());
  ASSERT_TRUE(cpu_->step(p1, c0.data(), bytes, hb, c.type, n, c1.data(), bytes).ok());

  Dev da(n * esz), db(n * esz), dy(n * esz);
  put(da.p, ha, n * esz);
  put(db.p, hb, n * esz);
  Status st = gpu_->encode(p, da.p, c.type, n, g0.data(), bytes);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = gpu_->step(p1, g0.data(), bytes, db.p, c.type, n, g1.data(), bytes);
  ASSERT_TRUE(st.ok()) << st.to_string();

  const bool exact = c.codec == CodecId::kNone || c.codec == CodecId::kBf16 ||
                     c.codec == CodecId::kFp16 || c.codec == CodecId::kQ8 ||
                     c.codec == CodecId::kQ4 || c.codec == CodecId::kQ2;
  if (exact) {
    EXPECT_EQ(g0.raw(), c0.raw()) << "encode packet differs";
    EXPECT_EQ(g1.raw(), c1.raw()) << "step packet differs";
  }
  // Decode in fp32 on both paths.
  std::vector<float> ycpu(n), ygpu(n), ycross(n);
  DecodeStats scpu, sgpu;
  ASSERT_TRUE(cpu_->decode(p1, c1.data(), bytes, ycpu.data(), ElemType::kF32, n, 0.5f, &scpu).ok());
  Dev dyf(n * 4);
  st = gpu_->decode(p1, g1.data(), bytes, dyf.p, ElemType::kF32, n, 0.5f, &sgpu);
  ASSERT_TRUE(st.ok()) << st.to_string();
  get(ygpu.data(), dyf.p, n * 4);
  ASSERT_TRUE(
      cpu_->decode(p1, g1.data(), bytes, ycross.data(), ElemType::kF32, n, 0.5f, nullptr).ok());
  EXPECT_LE(nmse(ycross, ygpu), 1e-12) << "the host decodes the GPU's packet differently";
  // CASQ: a last-bit difference in a bucket mean of the encode packet moves the step's sum, and
  // that can move a code at a threshold, hence a looser bound than s2's.
  const bool casq =
      c.codec == CodecId::kCasq2 || c.codec == CodecId::kCasq3 || c.codec == CodecId::kCasq4;
  EXPECT_LE(nmse(ycpu, ygpu), exact ? 0.0 : (casq ? 1e-6 : 1e-12));
  if (c.codec == CodecId::kS2) {
    EXPECT_EQ(sgpu.nonzeros, scpu.nonzeros);
  }
  // Decoding into the user's type on the device works too.
  st = gpu_->decode(p1, g1.data(), bytes, dy.p, c.type, n, 1.0f, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CudaBackendCodec, ::testing::ValuesIn(all_cases()), case_name);

// The ring's way: packets in the backend's pinned arena, many encodes and steps in flight at
// once (they share the device packet buffer and workspace in stream order), completed by polling
// test() in another order than they started. Every packet is the host backend's, byte for byte.
TEST(CudaBackend, OperationsInFlightThroughTheArenaMatchTheHostBackend) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaBackend> gpu;
  ASSERT_TRUE(make_cuda_backend(0, &gpu).ok());
  std::unique_ptr<Backend> cpu = make_host_backend();
  const int kOps = 12;  // more than the default pipeline depth
  const size_t n = 50000;
  ASSERT_TRUE(gpu->reserve_packet_memory(size_t(8) << 20).ok());
  for (CodecId codec : {CodecId::kQ8, CodecId::kBf16, CodecId::kCasq3, CodecId::kS2}) {
    SCOPED_TRACE(kernels::codec_name(codec));
    std::vector<std::vector<float>> xs;
    std::vector<CodecParams> ps;
    std::vector<Packet> want_enc, want_step;
    std::vector<uint8_t*> enc(kOps), stp(kOps);
    Dev dx(kOps * n * 4);
    for (int k = 0; k < kOps; ++k) {
      xs.push_back(make_data(codec == CodecId::kS2 ? Dist::kSparse10 : Dist::kLaplace, n, 40 + k));
      put(dx.as<float>() + k * n, xs[k].data(), n * 4);
      CodecParams p = params_for(codec, n / 5);
      p.offset_key = uint32_t(k);
      ps.push_back(p);
      const size_t bytes = cpu->packet_bytes(p, n);
      Packet e(bytes), st(bytes);
      CodecParams p1 = p;
      p1.step = 1;
      ASSERT_TRUE(cpu->encode(p, xs[k].data(), ElemType::kF32, n, e.data(), bytes).ok());
      ASSERT_TRUE(
          cpu->step(p1, e.data(), bytes, xs[k].data(), ElemType::kF32, n, st.data(), bytes).ok());
      want_enc.push_back(e);
      want_step.push_back(st);
      enc[k] = static_cast<uint8_t*>(gpu->alloc_packets(bytes));
      stp[k] = static_cast<uint8_t*>(gpu->alloc_packets(bytes));
      ASSERT_NE(enc[k], nullptr);
      ASSERT_NE(stp[k], nullptr);
    }
    auto poll_all = [&](std::vector<uint64_t>& tickets) {
      // Bounded by time, not by a count of polls: how fast the device works is not the test.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (std::chrono::steady_clock::now() < deadline) {
        bool all = true;
        for (int k = kOps - 1; k >= 0; --k) {  // completion checked in reverse order
          if (tickets[k] == 0) continue;
          bool done = false;
          Status st = gpu->test(tickets[k], &done);
          ASSERT_TRUE(st.ok()) << st.to_string();
          if (done) {
            tickets[k] = 0;
          } else {
            all = false;
          }
        }
        if (all) return;
      }
      FAIL() << "codec work never completed";
    };
    std::vector<uint64_t> tickets(kOps, 0);
    for (int k = 0; k < kOps; ++k) {
      const size_t bytes = want_enc[k].bytes;
      ASSERT_TRUE(gpu->encode_start(ps[k], dx.as<float>() + k * n, ElemType::kF32, n, enc[k], bytes,
                                    &tickets[k])
                      .ok());
    }
    poll_all(tickets);
    // Steps on the host backend's encode packets, so that only the step is compared.
    for (int k = 0; k < kOps; ++k) {
      const size_t bytes = want_enc[k].bytes;
      if (codec == CodecId::kQ8 || codec == CodecId::kBf16) {
        EXPECT_EQ(0, std::memcmp(enc[k], want_enc[k].data(), bytes)) << "encode packet " << k;
      }
      std::memcpy(enc[k], want_enc[k].data(), bytes);
      CodecParams p1 = ps[k];
      p1.step = 1;
      ASSERT_TRUE(gpu->step_start(p1, enc[k], bytes, dx.as<float>() + k * n, ElemType::kF32, n,
                                  stp[k], bytes, &tickets[k])
                      .ok());
    }
    poll_all(tickets);
    // Decodes of the step packets, in flight together too, into device memory.
    Dev dy(kOps * n * 4);
    std::vector<DecodeStats> ds(kOps);
    for (int k = 0; k < kOps; ++k) {
      CodecParams p1 = ps[k];
      p1.step = 1;
      ASSERT_TRUE(gpu->decode_start(p1, stp[k], want_step[k].bytes, dy.as<float>() + k * n,
                                    ElemType::kF32, n, 0.5f, &ds[k], &tickets[k])
                      .ok());
    }
    poll_all(tickets);
    std::vector<float> ygpu(kOps * n);
    get(ygpu.data(), dy.p, kOps * n * 4);
    for (int k = 0; k < kOps; ++k) {
      const size_t bytes = want_step[k].bytes;
      if (codec == CodecId::kQ8 || codec == CodecId::kBf16) {
        EXPECT_EQ(0, std::memcmp(stp[k], want_step[k].data(), bytes)) << "step packet " << k;
      }
      // Every packet decodes on the host to what the host's own packet decodes to (CASQ and s2:
      // to rounding, their fp64 sums are formed by atomics on the device).
      std::vector<float> a(n), b(n);
      CodecParams p1 = ps[k];
      p1.step = 1;
      ASSERT_TRUE(cpu->decode(p1, stp[k], bytes, a.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
      ASSERT_TRUE(
          cpu->decode(p1, want_step[k].data(), bytes, b.data(), ElemType::kF32, n, 1.0f, nullptr)
              .ok());
      EXPECT_LE(nmse(a, b), 1e-6) << "step packet " << k;
      // The device's decode of its own packet is the host's decode of it (scale 0.5).
      std::vector<float> y(ygpu.begin() + k * n, ygpu.begin() + (k + 1) * n), half(n);
      for (size_t i = 0; i < n; ++i)
        half[i] = 0.5f * a[i];
      EXPECT_LE(nmse(y, half), codec == CodecId::kS2 ? 1e-12 : 0.0) << "decode " << k;
      EXPECT_GT(ds[k].nonzeros, 0u) << "decode statistics " << k;
      gpu->free_packets(enc[k]);
      gpu->free_packets(stp[k]);
    }
  }
}

// ---- error feedback ------------------------------------------------------------------------

// Device error feedback (residual, compensation and update in device memory) against the host
// backend on the same values: the same bits everywhere, the sums to rounding (their order differs).
TEST(CudaBackend, ErrorFeedbackOnTheDeviceMatchesTheHost) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaBackend> gpu;
  ASSERT_TRUE(make_cuda_backend(0, &gpu).ok());
  auto cpu = make_host_backend();
  const size_t n = 70001;
  auto dev_values = [&](const std::unique_ptr<F32Array>& a) {
    std::vector<float> v(a->size());
    get(v.data(), a->data(), v.size() * sizeof(float));
    return v;
  };
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBf16}) {
    const std::vector<uint8_t> x = user_bytes(make_data(Dist::kLaplace, n, 21), t);
    Dev dx(x.size());
    put(dx.p, x.data(), x.size());
    const std::vector<float> r0 = make_data(Dist::kGauss, n, 22);
    std::unique_ptr<F32Array> hr, hc, dr, dc;
    ASSERT_TRUE(cpu->alloc_f32(n, &hr).ok());
    ASSERT_TRUE(cpu->alloc_f32(n, &hc).ok());
    ASSERT_TRUE(gpu->alloc_f32(n, &dr).ok());
    ASSERT_TRUE(gpu->alloc_f32(n, &dc).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the zeroing ran on the backend's stream
    EXPECT_EQ(dev_values(dr), std::vector<float>(n, 0.0f)) << "alloc_f32 zeroes";
    std::memcpy(hr->data(), r0.data(), n * sizeof(float));
    put(dr->data(), r0.data(), n * sizeof(float));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before the backend's stream reads it

    ASSERT_TRUE(cpu->ef_compensate(x.data(), t, n, hr->data(), hc->data()).ok());
    ASSERT_TRUE(gpu->ef_compensate(dx.p, t, n, dr->data(), dc->data()).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // asynchronous on the backend's stream
    const std::vector<float> comp = dev_values(dc);
    EXPECT_TRUE(same_bits(comp.data(), hc->data(), n));

    // The update on given decoded values, with and without an incoming partial sum.
    const std::vector<float> in = make_data(Dist::kGauss, n, 23);
    const std::vector<float> out = decoded_with_non_finite(n, 24);
    std::unique_ptr<F32Array> din, dout;
    ASSERT_TRUE(gpu->alloc_f32(n, &din).ok());
    ASSERT_TRUE(gpu->alloc_f32(n, &dout).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    put(din->data(), in.data(), n * sizeof(float));
    put(dout->data(), out.data(), n * sizeof(float));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // before the backend's stream reads it
    for (bool with_in : {false, true}) {
      kernels::EfSums hs, ds;
      ASSERT_TRUE(
          cpu->ef_update(hc->data(), with_in ? in.data() : nullptr, out.data(), n, hr->data(), &hs)
              .ok());
      ASSERT_TRUE(gpu->ef_update(dc->data(), with_in ? din->data() : nullptr, dout->data(), n,
                                 dr->data(), &ds)
                      .ok());
      const std::vector<float> res = dev_values(dr);
      EXPECT_TRUE(same_bits(res.data(), hr->data(), n)) << "with_in " << with_in;
      EXPECT_NEAR(ds.input_sq, hs.input_sq, 1e-12 * hs.input_sq);
      EXPECT_NEAR(ds.residual_sq, hs.residual_sq, 1e-12 * hs.residual_sq);
    }

    // End to end through q4, whose packets and decodes are the same bits on both backends.
    CodecParams p = params_for(CodecId::kQ4, n);
    const size_t bytes = gpu->packet_bytes(p, n);
    Packet hp(bytes), dp(bytes);
    ASSERT_TRUE(cpu->encode(p, hc->data(), ElemType::kF32, n, hp.data(), bytes).ok());
    ASSERT_TRUE(gpu->encode(p, dc->data(), ElemType::kF32, n, dp.data(), bytes).ok());
    EXPECT_EQ(hp.raw(), dp.raw());
    std::vector<float> hdec(n);
    ASSERT_TRUE(
        cpu->decode(p, hp.data(), bytes, hdec.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
    ASSERT_TRUE(
        gpu->decode(p, dp.data(), bytes, dout->data(), ElemType::kF32, n, 1.0f, nullptr).ok());
    kernels::EfSums hs, ds;
    ASSERT_TRUE(cpu->ef_update(hc->data(), nullptr, hdec.data(), n, hr->data(), &hs).ok());
    ASSERT_TRUE(gpu->ef_update(dc->data(), nullptr, dout->data(), n, dr->data(), &ds).ok());
    const std::vector<float> res = dev_values(dr);
    EXPECT_TRUE(same_bits(res.data(), hr->data(), n));
    EXPECT_GT(ds.residual_sq, 0.0);
    EXPECT_NEAR(ds.residual_sq, hs.residual_sq, 1e-12 * hs.residual_sq);
  }
}

TEST(CudaBackend, CorruptPacketIsAnErrorAndTheBackendStaysUsable) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaBackend> gpu;
  ASSERT_TRUE(make_cuda_backend(0, &gpu).ok());
  const size_t n = 5000;
  std::vector<float> a = make_data(Dist::kGauss, n, 3);
  Dev da(n * 4), dy(n * 4);
  put(da.p, a.data(), n * 4);
  CodecParams p = params_for(CodecId::kQ8, n);
  const size_t bytes = gpu->packet_bytes(p, n);
  Packet pk(bytes), out(bytes);
  ASSERT_TRUE(gpu->encode(p, da.p, ElemType::kF32, n, pk.data(), bytes).ok());
  static_cast<uint8_t*>(pk.data())[0] ^= 0xff;  // magic
  CodecParams p1 = p;
  p1.step = 1;
  EXPECT_FALSE(gpu->step(p1, pk.data(), bytes, da.p, ElemType::kF32, n, out.data(), bytes).ok());
  EXPECT_FALSE(gpu->decode(p, pk.data(), bytes, dy.p, ElemType::kF32, n, 1.0f, nullptr).ok());
  EXPECT_FALSE(
      gpu->step(p1, pk.data(), bytes - 1, da.p, ElemType::kF32, n, out.data(), bytes).ok());
  // Still usable.
  ASSERT_TRUE(gpu->encode(p, da.p, ElemType::kF32, n, pk.data(), bytes).ok());
  ASSERT_TRUE(gpu->decode(p, pk.data(), bytes, dy.p, ElemType::kF32, n, 1.0f, nullptr).ok());
}

TEST(CudaBackend, SparseHelpersMatchTheHostBackend) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaBackend> gpu;
  ASSERT_TRUE(make_cuda_backend(0, &gpu).ok());
  auto cpu = make_host_backend();
  for (size_t n : {size_t(1), size_t(64), size_t(1000), size_t(100003)}) {
    std::vector<float> x = make_data(Dist::kSparse10, n, n);
    Dev dx(n * 4), dy(n * 4);
    put(dx.p, x.data(), n * 4);
    const size_t words = kernels::bitmap_bytes(n) / 8;
    std::vector<uint64_t> bc(words, 0), bg(words, 0);
    ASSERT_TRUE(cpu->bitmap_build(x.data(), ElemType::kF32, n, bc.data()).ok());
    ASSERT_TRUE(gpu->bitmap_build(dx.p, ElemType::kF32, n, bg.data()).ok());
    ASSERT_EQ(bg, bc) << n;
    size_t m = 0, mc = 0, mg = 0;
    ASSERT_TRUE(cpu->bitmap_popcount(bc.data(), n, &m).ok());
    std::vector<float> vc(m + 1), vg(m + 1);
    ASSERT_TRUE(cpu->sparse_compact(bc.data(), n, x.data(), ElemType::kF32, vc.data(), &mc).ok());
    ASSERT_TRUE(gpu->sparse_compact(bc.data(), n, dx.p, ElemType::kF32, vg.data(), &mg).ok());
    EXPECT_EQ(mc, m);
    EXPECT_EQ(mg, m);
    EXPECT_EQ(vg, vc);
    std::vector<float> yc(n), yg(n);
    ASSERT_TRUE(
        cpu->sparse_scatter(bc.data(), n, vc.data(), 2.0f, yc.data(), ElemType::kF32, &mc).ok());
    ASSERT_TRUE(gpu->sparse_scatter(bc.data(), n, vc.data(), 2.0f, dy.p, ElemType::kF32, &mg).ok());
    EXPECT_EQ(mc, m);
    EXPECT_EQ(mg, m);
    get(yg.data(), dy.p, n * 4);
    EXPECT_EQ(yg, yc);
  }
}

// ---- the stream gate ---------------------------------------------------------------------

class Gate : public ::testing::TestWithParam<CudaStreamGate::Mechanism> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE();
    Status st = CudaStreamGate::create(0, GetParam(), &gate_);
    if (!st.ok() && GetParam() == CudaStreamGate::Mechanism::kStreamWaitValue) {
      GTEST_SKIP() << "no stream memory operations here: " << st.to_string();
    }
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(cudaStreamCreateWithFlags(&s1_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&s2_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(gputest::preload_kernels(), cudaSuccess);  // before any stream is gated
    ASSERT_EQ(cudaStreamCreateWithFlags(&proxy_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (s1_ != nullptr) cudaStreamDestroy(s1_);
    if (s2_ != nullptr) cudaStreamDestroy(s2_);
    if (proxy_ != nullptr) cudaStreamDestroy(proxy_);
  }
  // Polls `s` for up to `seconds`: true when it completed.
  static bool finishes(cudaStream_t s, double seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return true;
      if (e != cudaErrorNotReady) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  std::unique_ptr<CudaStreamGate> gate_;
  cudaStream_t s1_ = nullptr, s2_ = nullptr, proxy_ = nullptr;
};

// A kernel queued before the gate writes the input (slowly); the "proxy" sees it complete; a
// kernel queued after reads what the proxy wrote; the caller never blocks; another stream runs
// to completion while the gate is closed.
TEST_P(Gate, OrdersTheCallersStreamWithoutBlockingOthers) {
  const size_t n = 1 << 20;
  Dev x(n * 4), y(n * 4), sum(sizeof(double));
  ASSERT_EQ(cudaMemset(y.p, 0, n * 4), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(gputest::fill_after_delay(x.as<float>(), n, 5.0f, 200, s1_), cudaSuccess);
  GateTicket t;
  auto t0 = std::chrono::steady_clock::now();
  gate_->reserve(&t);
  Status st = gate_->enqueue(s1_, t);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(gputest::sum_to(y.as<float>(), n, sum.as<double>(), s1_), cudaSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100))
      << "enqueue blocked the caller";
  EXPECT_EQ(cudaStreamQuery(s1_), cudaErrorNotReady);
  EXPECT_FALSE(t.marker->fired()) << "the marker ran before the kernel queued ahead of it";

  // The proxy: waits for the marker, checks the input is complete, writes y = x.
  std::vector<float> seen(n);
  ASSERT_TRUE(t.marker->wait(30, nullptr).ok());
  ASSERT_EQ(cudaMemcpyAsync(seen.data(), x.p, n * 4, cudaMemcpyDeviceToHost, proxy_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(proxy_), cudaSuccess);
  for (size_t i = 0; i < n; i += 4099)
    ASSERT_EQ(seen[i], 5.0f + static_cast<float>(i % 7)) << i;
  ASSERT_EQ(cudaMemcpyAsync(y.p, x.p, n * 4, cudaMemcpyDeviceToDevice, proxy_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(proxy_), cudaSuccess);

  // While the gate is closed: the caller's stream waits, another stream runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(cudaStreamQuery(s1_), cudaErrorNotReady) << "the stream did not wait for the flag";
  ASSERT_EQ(gputest::spin_ms(5, s2_), cudaSuccess);
  const bool other_ran = finishes(s2_, 10);
  gate_->release(t.seq);
  EXPECT_TRUE(other_ran) << "another stream was blocked by the gate";
  ASSERT_TRUE(finishes(s1_, 10)) << "release did not let the caller's stream go on";
  double got = 0;
  get(&got, sum.p, sizeof got);
  double want = 0;
  for (size_t i = 0; i < n; ++i)
    want += 5.0 + static_cast<double>(i % 7);
  EXPECT_EQ(got, want) << "the kernel after the gate did not see the proxy's output";
}

// Release before the stream gets there (a failed or aborted AllReduce): no wait ever blocks,
// later tickets keep working.
TEST_P(Gate, EarlyReleaseNeverBlocksAndSequencesContinue) {
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(gputest::spin_ms(20, s1_), cudaSuccess);
    GateTicket t;
    EXPECT_FALSE(gate_->holding());
    gate_->reserve(&t);
    ASSERT_TRUE(gate_->enqueue(s1_, t).ok());
    // Held until released: the arena must not grow meanwhile (docs/cuda.md).
    EXPECT_TRUE(gate_->holding());
    EXPECT_TRUE(CudaStreamGate::any_holding());
    gate_->release(t.seq);
    EXPECT_FALSE(gate_->holding());
    EXPECT_FALSE(CudaStreamGate::any_holding());
    EXPECT_TRUE(finishes(s1_, 10));
    EXPECT_TRUE(t.marker->fired());
  }
  // The legacy default stream (nullptr) works too.
  GateTicket t;
  gate_->reserve(&t);
  ASSERT_TRUE(gate_->enqueue(nullptr, t).ok());
  ASSERT_TRUE(t.marker->wait(10, nullptr).ok());
  gate_->release_all();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Gate,
                         ::testing::Values(CudaStreamGate::Mechanism::kStreamWaitValue,
                                           CudaStreamGate::Mechanism::kSpinKernel),
                         [](const ::testing::TestParamInfo<CudaStreamGate::Mechanism>& i) {
                           return i.param == CudaStreamGate::Mechanism::kSpinKernel
                                      ? std::string("SpinKernel")
                                      : std::string("StreamWaitValue");
                         });

// One two-shot AllReduce (or ReduceScatter) of `x` at P ranks as threads over loopback sockets,
// on host buffers or on device buffers (the CUDA backend's sums); each rank's output, and how
// many of the ranks' calls ran two-shot.
std::vector<std::vector<float>> two_shot_outputs(CodecId codec,
                                                 const std::vector<std::vector<float>>& x,
                                                 bool scatter, bool device, int* two_shot_calls) {
  const int p = static_cast<int>(x.size());
  const size_t count = x[0].size();
  const size_t out = scatter ? count / static_cast<size_t>(p) : count;
  coll::Settings s;
  s.auto_codec = false;
  s.codec = codec;
  s.algo = coll::Settings::Algo::kTwoShot;
  auto t = testutil::loopback_transports(p, 60);
  std::vector<std::unique_ptr<coll::AllReduceEngine>> eng;
  for (int r = 0; r < p; ++r)
    eng.push_back(std::make_unique<coll::AllReduceEngine>(s, p));
  std::vector<std::vector<float>> y(static_cast<size_t>(p), std::vector<float>(out, -1.f));
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r) {
    th.emplace_back([&, r] {
      const auto ru = static_cast<size_t>(r);
      std::unique_ptr<Dev> dx, dy;
      coll::AllReduceArgs a;
      a.count = count;
      a.kind = scatter ? coll::CallKind::kReduceScatter : coll::CallKind::kAllReduce;
      a.type = ElemType::kF32;
      if (device) {
        dx = std::make_unique<Dev>(count * sizeof(float));
        dy = std::make_unique<Dev>(out * sizeof(float));
        put(dx->p, x[ru].data(), count * sizeof(float));
        a.send = dx->p;
        a.recv = dy->p;
        a.mem = MemoryType::kDevice;
      } else {
        a.send = x[ru].data();
        a.recv = y[ru].data();
        a.mem = MemoryType::kHost;
      }
      coll::RingLink link;
      link.transport = t[ru].get();
      link.rank = r;
      link.nranks = p;
      link.timeout_s = 60;
      link.op_seq = 1;
      Status st = eng[ru]->run(link, a);
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (device) get(y[ru].data(), dy->p, out * sizeof(float));
    });
  }
  for (auto& thr : th)
    thr.join();
  *two_shot_calls = 0;
  for (int r = 0; r < p; ++r) {
    *two_shot_calls += static_cast<int>(
        eng[static_cast<size_t>(r)]->stats().by_codec[kernels::codec_name(codec)].two_shot_calls);
  }
  return y;
}

// Two-shot on device buffers is the host's scheme with the kernels' CUDA build: the same packets
// and the same fp32 sums (kernels/sum_impl.h), so for the codecs whose packets are the host's
// bits (bf16, fp16, q8/q4/q2: EncodeStepDecodeMatchTheHostBackend) every rank's output is the
// host run's, bit for bit; CASQ's fits agree to rounding, so its outputs agree to CASQ's bound
// there, and an AllReduce's ranks hold the same bits. AllReduce and ReduceScatter, 2 and 4 ranks.
TEST(CudaBackend, TwoShotOnDeviceBuffersGivesTheHostsBits) {
  SKIP_WITHOUT_DEVICE();
  const CodecId codecs[] = {CodecId::kBf16, CodecId::kFp16,  CodecId::kQ8,    CodecId::kQ4,
                            CodecId::kQ2,   CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4};
  for (int p : {2, 4}) {
    const size_t count = 12000 + 37 * static_cast<size_t>(p);  // odd chunks and slices
    std::vector<std::vector<float>> x;
    for (int r = 0; r < p; ++r)
      x.push_back(make_data(Dist::kLaplace, count, 101 + static_cast<uint64_t>(r)));
    for (CodecId codec : codecs) {
      const bool casq =
          codec == CodecId::kCasq2 || codec == CodecId::kCasq3 || codec == CodecId::kCasq4;
      for (bool scatter : {false, true}) {
        SCOPED_TRACE(std::string(kernels::codec_name(codec)) +
                     (scatter ? " ReduceScatter" : " AllReduce") + " at " + std::to_string(p) +
                     " ranks");
        int host_calls = 0, device_calls = 0;
        const auto host = two_shot_outputs(codec, x, scatter, false, &host_calls);
        const auto dev = two_shot_outputs(codec, x, scatter, true, &device_calls);
        EXPECT_EQ(host_calls, p);
        EXPECT_EQ(device_calls, p) << "device buffers did not run two-shot";
        for (int r = 0; r < p; ++r) {
          const auto ru = static_cast<size_t>(r);
          if (!scatter) {
            EXPECT_EQ(std::memcmp(dev[ru].data(), dev[0].data(), dev[0].size() * sizeof(float)), 0)
                << "rank " << r << " differs from rank 0 on the device";
          }
          if (casq) {
            EXPECT_LE(nmse(host[ru], dev[ru]), 1e-6) << "rank " << r;
          } else {
            EXPECT_EQ(std::memcmp(dev[ru].data(), host[ru].data(), host[ru].size() * sizeof(float)),
                      0)
                << "rank " << r << " differs from the host run";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace sketchccl::backend
