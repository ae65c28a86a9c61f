// GPU path of every codec against the CPU path on the same inputs (CUDA builds only). Skips
// itself when no CUDA device is usable (as on the CI machines).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/codec.h"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/sparse.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::kernels {
namespace {

using testing::all_codecs;
using testing::Dist;
using testing::make_data;
using testing::nmse;
using testing::Packet;
using testing::params_for;

bool have_device() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) {
    if (cudaMalloc(reinterpret_cast<void**>(&p), b ? b : 1) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void put(const void* h, size_t b) {
    ASSERT_EQ(cudaMemcpy(p, h, b, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void get(void* h, size_t b) const {
    ASSERT_EQ(cudaMemcpy(h, p, b, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

class CodecGpuTest : public ::testing::TestWithParam<CodecId> {
 protected:
  void SetUp() override {
    if (!have_device()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CodecGpuTest, MatchesCpu) {
  const CodecId c = GetParam();
  const size_t n = 5003;
  std::vector<float> a = make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kLaplace, n, 1);
  std::vector<float> b = make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kLaplace, n, 2);
  b[4000] = NAN;  // a non-finite block must come out non-finite on both paths
  CodecParams p = params_for(c, 2 * n / 5);
  const size_t bytes = packet_bytes(p, n);
  // CPU
  Packet c0(bytes), c1(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, c0.data(), bytes).ok());
  CodecParams p1 = p;
  p1.step = 1;
  ASSERT_TRUE(step(p1, c0.data(), bytes, b.data(), ElemType::kF32, n, c1.data(), bytes).ok());
  std::vector<float> ycpu(n);
  DecodeStats scpu;
  ASSERT_TRUE(decode(p1, c1.data(), bytes, ycpu.data(), ElemType::kF32, n, 1.0f, &scpu).ok());
  // GPU
  const size_t wsb = cuda::workspace_bytes(p, n);
  DevBuf<float> da(n * 4), db(n * 4), dy(n * 4);
  DevBuf<uint8_t> g0(bytes), g1(bytes), ws(wsb);
  DevBuf<DecodeStats> dst(sizeof(DecodeStats));
  da.put(a.data(), n * 4);
  db.put(b.data(), n * 4);
  ASSERT_TRUE(cuda::encode(p, da.p, ElemType::kF32, n, g0.p, bytes, ws.p, wsb, nullptr).ok());
  ASSERT_TRUE(
      cuda::step(p1, g0.p, bytes, db.p, ElemType::kF32, n, g1.p, bytes, ws.p, wsb, nullptr).ok());
  ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
  ASSERT_TRUE(
      cuda::decode(p1, g1.p, bytes, dy.p, ElemType::kF32, n, 1.0f, dst.p, ws.p, wsb, nullptr).ok());
  ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
  std::vector<float> ygpu(n);
  dy.get(ygpu.data(), n * 4);
  DecodeStats sgpu;
  dst.get(&sgpu, sizeof(sgpu));
  // The GPU packet is a valid packet for the CPU decoder, with the same result.
  Packet gp(bytes);
  g1.get(gp.data(), bytes);
  std::vector<float> ycross(n);
  ASSERT_TRUE(decode(p1, gp.data(), bytes, ycross.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  std::vector<float> fc, fg, fx;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::isfinite(ycpu[i]), std::isfinite(ygpu[i])) << i;
    if (std::isfinite(ycpu[i])) {
      fc.push_back(ycpu[i]);
      fg.push_back(ygpu[i]);
      fx.push_back(ycross[i]);
    }
  }
  EXPECT_FALSE(std::isfinite(ygpu[4000]));
  // Exact codecs match to rounding; stochastic and data-fitted ones to a small fraction of
  // their own error (FMA contraction on the GPU may move a stochastic rounding decision).
  const bool exactish =
      c == CodecId::kNone || c == CodecId::kBf16 || c == CodecId::kFp16 || c == CodecId::kS2;
  EXPECT_LE(nmse(fc, fg), exactish ? 1e-12 : 2e-3);
  EXPECT_LE(nmse(fx, fg), 1e-12);
  if (c == CodecId::kS2) {
    EXPECT_EQ(sgpu.nonzeros, scpu.nonzeros);
    EXPECT_EQ(sgpu.peeled, scpu.peeled);
  }
}

TEST_P(CodecGpuTest, RejectsMalformedPacketOnDevice) {
  const CodecId c = GetParam();
  const size_t n = 1000;
  std::vector<float> a = make_data(Dist::kGauss, n, 1);
  CodecParams p = params_for(c, n);
  const size_t bytes = packet_bytes(p, n), wsb = cuda::workspace_bytes(p, n);
  Packet bad(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, bad.data(), bytes).ok());
  reinterpret_cast<uint8_t*>(bad.data())[8] ^= 0x40;  // element count
  DevBuf<uint8_t> g(bytes), ws(wsb);
  DevBuf<float> dy(n * 4);
  g.put(bad.data(), bytes);
  ASSERT_TRUE(
      cuda::decode(p, g.p, bytes, dy.p, ElemType::kF32, n, 1.0f, nullptr, ws.p, wsb, nullptr).ok());
  EXPECT_FALSE(cuda::read_device_error(ws.p, nullptr).ok());
  EXPECT_FALSE(
      cuda::decode(p, g.p, bytes - 8, dy.p, ElemType::kF32, n, 1.0f, nullptr, ws.p, wsb, nullptr)
          .ok());
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecGpuTest, ::testing::ValuesIn(all_codecs()),
                         [](const ::testing::TestParamInfo<CodecId>& i) {
                           return std::string(codec_name(i.param));
                         });

TEST(SparseGpu, MatchesCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 100003;
  std::vector<float> x = make_data(Dist::kSparse1, n, 3);
  std::vector<uint64_t> bm(bitmap_bytes(n) / 8);
  bitmap_build(x.data(), ElemType::kF32, n, bm.data());
  const size_t m = bitmap_popcount(bm.data(), n);
  std::vector<float> vals(m);
  sparse_compact(bm.data(), n, x.data(), ElemType::kF32, vals.data());
  DevBuf<float> dx(n * 4), dv(m * 4 + 4), dy(n * 4);
  DevBuf<uint64_t> dbm(bitmap_bytes(n));
  DevBuf<unsigned long long> dcount(8);
  DevBuf<uint8_t> ws(cuda::sparse_workspace_bytes(n));
  dx.put(x.data(), n * 4);
  cuda::bitmap_build(dx.p, ElemType::kF32, n, dbm.p, nullptr);
  cuda::bitmap_popcount(dbm.p, n, dcount.p, nullptr);
  cuda::sparse_compact(dbm.p, n, dx.p, ElemType::kF32, dv.p, ws.p, nullptr);
  cuda::sparse_scatter(dbm.p, n, dv.p, 2.0f, dy.p, ElemType::kF32, ws.p, nullptr);
  unsigned long long count = 0;
  dcount.get(&count, 8);
  EXPECT_EQ(count, m);
  std::vector<uint64_t> gbm(bm.size());
  dbm.get(gbm.data(), bitmap_bytes(n));
  EXPECT_EQ(gbm, bm);
  std::vector<float> gv(m), gy(n);
  dv.get(gv.data(), m * 4);
  dy.get(gy.data(), n * 4);
  EXPECT_EQ(gv, vals);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(gy[i], 2.0f * x[i]) << i;
}

}  // namespace
}  // namespace sketchccl::kernels
