// GPU path of every codec against the CPU path on the same inputs (CUDA builds only). Skips
// itself when no CUDA device is usable (as on the CI machines).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_impl.h"
#include "kernels/cuda/codec_cuda.h"
#include "kernels/sparse.h"
#include "sketchccl_build_config.h"
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

bool is_casq_or_s2(CodecId c) {
  return c == CodecId::kCasq2 || c == CodecId::kCasq3 || c == CodecId::kCasq4 || c == CodecId::kS2;
}

// fp32 values as elements of type t, after `shift` leading elements (16 bytes of slack).
std::vector<uint8_t> typed(const std::vector<float>& v, ElemType t, size_t shift) {
  const size_t esz = elem_size(t);
  std::vector<uint8_t> out((v.size() + shift) * esz + 16, 0);
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* d = out.data() + (i + shift) * esz;
    if (t == ElemType::kF32) {
      memcpy(d, &v[i], 4);
    } else {
      const uint16_t h =
          t == ElemType::kF16 ? detail::float_to_half(v[i]) : detail::float_to_bf16(v[i]);
      memcpy(d, &h, 2);
    }
  }
  return out;
}

// Byte equality, except s2's counters (doubles summed by atomics in the step: within 1e-9
// relative). CASQ's fit folds in the CPU's tree order, its scales are exact maxima (rounded up to
// bf16) and its rounding is counter-based, so its packets are the CPU's byte for byte.
void expect_same_packet(const CodecParams& p, size_t n, const Packet& cpu, const Packet& gpu) {
  const uint8_t* a = static_cast<const uint8_t*>(cpu.data());
  const uint8_t* b = static_cast<const uint8_t*>(gpu.data());
  size_t lo = cpu.bytes, hi = cpu.bytes;  // the tolerant range [lo, hi)
  bool doubles = false;
  if (p.codec == CodecId::kS2) {
    const detail::S2Layout L = detail::s2_layout(p.s2_rows, p.s2_counters, n);
    lo = L.sketch_off;
    hi = L.total;
    doubles = true;
  }
  EXPECT_EQ(0, memcmp(a, b, lo)) << "bytes before the summed part differ";
  EXPECT_EQ(0, memcmp(a + hi, b + hi, cpu.bytes - hi)) << "bytes after the summed part differ";
  const size_t w = doubles ? 8 : 4;
  for (size_t o = lo; o < hi; o += w) {
    double x, y;
    if (doubles) {
      memcpy(&x, a + o, 8);
      memcpy(&y, b + o, 8);
    } else {
      float fx, fy;
      memcpy(&fx, a + o, 4);
      memcpy(&fy, b + o, 4);
      x = fx;
      y = fy;
    }
    ASSERT_LE(std::fabs(x - y), (doubles ? 1e-9 : 1e-6) * (std::fabs(x) + 1e-30)) << "offset " << o;
  }
}

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
  // Without FMA contraction (-fmad=false) every codec but s2 agrees bit for bit (s2's counters
  // are sums formed by atomics in the step, whose order can move their last bits). Decoding one
  // packet gives the same bits on both, s2 included (fixed-point peeling is order-free).
  const bool exact = c != CodecId::kS2;
  EXPECT_LE(nmse(fc, fg), exact ? 0.0 : 1e-10);
  for (size_t i = 0; i < fx.size(); ++i)
    ASSERT_EQ(detail::f2u(fx[i]), detail::f2u(fg[i])) << i;
  if (c == CodecId::kS2) {
    EXPECT_EQ(sgpu.nonzeros, scpu.nonzeros);
    EXPECT_EQ(sgpu.peeled, scpu.peeled);
  }
}

// Every element type, a start that is not 16-byte aligned (the scalar path of the grouped
// loads) and one that is, counts that are not multiples of 8 or 256, the step in place: the
// packets the GPU writes are the CPU's, byte for byte, outside the atomically summed parts.
// The device path's second rung (src/coll/device_ring.h): the call number is not a launch
// argument but a word of mapped host memory written after the launches were enqueued; the
// kernels derive the keys from it as the CPU does from CodecParams::call (the same packet and
// output bytes). Other families refuse it.
TEST_P(CodecGpuTest, CallNumberReadOnTheDeviceGivesTheCpuBytes) {
  const CodecId c = GetParam();
  const size_t n = 3001;
  CodecParams p = params_for(c, n / 3);
  p.call = 77;
  uint64_t* call = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&call), 64, cudaHostAllocMapped), cudaSuccess);
  *call = 0;
  CodecParams pd = p;
  pd.call = 0;  // ignored: the kernels read *call
  const size_t bytes = packet_bytes(p, n), wsb = cuda::workspace_bytes(p, n);
  std::vector<float> a = make_data(Dist::kLaplace, n, 3), b = make_data(Dist::kLaplace, n, 4);
  DevBuf<float> da(n * 4), db(n * 4), dy(n * 4);
  DevBuf<uint8_t> g(bytes), ws(wsb);
  da.put(a.data(), n * 4);
  db.put(b.data(), n * 4);
  if (codec_info(c)->family != CodecFamily::kLinear) {
    EXPECT_EQ(
        cuda::encode(pd, da.p, ElemType::kF32, n, g.p, bytes, ws.p, wsb, nullptr, call).code(),
        Code::kInvalidArgument);
    cudaFreeHost(call);
    return;
  }
  Packet c0(bytes), c1(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, c0.data(), bytes).ok());
  CodecParams p1 = p, pd1 = pd;
  p1.step = pd1.step = 1;
  ASSERT_TRUE(step(p1, c0.data(), bytes, b.data(), ElemType::kF32, n, c1.data(), bytes).ok());
  std::vector<float> ycpu(n);
  ASSERT_TRUE(decode(p1, c1.data(), bytes, ycpu.data(), ElemType::kF32, n, 0.5f, nullptr).ok());
  *call = p.call;
  ASSERT_TRUE(cuda::encode(pd, da.p, ElemType::kF32, n, g.p, bytes, ws.p, wsb, nullptr, call).ok());
  ASSERT_TRUE(
      cuda::step(pd1, g.p, bytes, db.p, ElemType::kF32, n, g.p, bytes, ws.p, wsb, nullptr, call)
          .ok());
  ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
  Packet gp(bytes);
  g.get(gp.data(), bytes);
  EXPECT_EQ(std::memcmp(gp.data(), c1.data(), bytes), 0) << "the stepped packet's bytes";
  ASSERT_TRUE(cuda::decode(pd1, g.p, bytes, dy.p, ElemType::kF32, n, 0.5f, nullptr, ws.p, wsb,
                           nullptr, nullptr, call)
                  .ok());
  ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
  std::vector<float> ygpu(n);
  dy.get(ygpu.data(), n * 4);
  EXPECT_EQ(std::memcmp(ygpu.data(), ycpu.data(), n * 4), 0) << "the decoded bytes";
  cudaFreeHost(call);
}

TEST_P(CodecGpuTest, PacketsMatchCpuBytes) {
  const CodecId c = GetParam();
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBf16}) {
    for (size_t n : {size_t(1), size_t(13), size_t(4099), size_t(100003)}) {
      for (size_t shift : {size_t(0), size_t(1)}) {
        SCOPED_TRACE(::testing::Message() << "type " << int(t) << " n " << n << " shift " << shift);
        const size_t esz = elem_size(t);
        std::vector<float> fa = make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kGauss, n, 5);
        std::vector<float> fb = make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kGauss, n, 6);
        std::vector<uint8_t> ha = typed(fa, t, shift), hb = typed(fb, t, shift);
        CodecParams p = params_for(c, n / 4 + 1);
        CodecParams p1 = p;
        p1.step = 1;
        const size_t bytes = packet_bytes(p, n), wsb = cuda::workspace_bytes(p, n);
        Packet c0(bytes), c1(bytes);
        const void* xa = ha.data() + shift * esz;
        const void* xb = hb.data() + shift * esz;
        ASSERT_TRUE(encode(p, xa, t, n, c0.data(), bytes).ok());
        ASSERT_TRUE(step(p1, c0.data(), bytes, xb, t, n, c1.data(), bytes).ok());
        DevBuf<uint8_t> da(ha.size()), db(hb.size()), g(bytes), ws(wsb);
        da.put(ha.data(), ha.size());
        db.put(hb.data(), hb.size());
        ASSERT_TRUE(cuda::encode(p, da.p + shift * esz, t, n, g.p, bytes, ws.p, wsb, nullptr).ok());
        Packet ge(bytes);
        g.get(ge.data(), bytes);
        expect_same_packet(p, n, c0, ge);
        // The step from the CPU's packet, in place on the device.
        g.put(c0.data(), bytes);
        ASSERT_TRUE(
            cuda::step(p1, g.p, bytes, db.p + shift * esz, t, n, g.p, bytes, ws.p, wsb, nullptr)
                .ok());
        ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
        Packet gs(bytes);
        g.get(gs.data(), bytes);
        expect_same_packet(p1, n, c1, gs);
        // Decoding the same packet into the element type: identical values.
        std::vector<uint8_t> ycpu(n * esz + 16), ygpu(n * esz + 16);
        ASSERT_TRUE(
            decode(p1, c1.data(), bytes, ycpu.data() + shift * esz, t, n, 0.5f, nullptr).ok());
        DevBuf<uint8_t> dy(ygpu.size());
        g.put(c1.data(), bytes);
        ASSERT_TRUE(cuda::decode(p1, g.p, bytes, dy.p + shift * esz, t, n, 0.5f, nullptr, ws.p, wsb,
                                 nullptr)
                        .ok());
        ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
        dy.get(ygpu.data(), ygpu.size());
        EXPECT_EQ(0, memcmp(ycpu.data() + shift * esz, ygpu.data() + shift * esz, n * esz));
      }
    }
  }
}

// The same s2 packet decoded again and again on the device: the same bits every time (the
// atomics' order changes from run to run; the fixed-point residuals make it irrelevant). CASQ
// with nearest rounding (error feedback's): the CPU's packet byte for byte.
TEST_P(CodecGpuTest, RepeatedDecodesAndManyBucketsAreExact) {
  const CodecId c = GetParam();
  if (!is_casq_or_s2(c)) GTEST_SKIP() << "s2 and CASQ only";
  const size_t n = 262147;
  std::vector<float> a = make_data(c == CodecId::kS2 ? Dist::kSparse10 : Dist::kLaplace, n, 11);
  CodecParams p = params_for(c, n / 10);
  p.casq_nearest = true;
  const size_t bytes = packet_bytes(p, n), wsb = cuda::workspace_bytes(p, n);
  Packet cp(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, cp.data(), bytes).ok());
  DevBuf<float> da(n * 4), dy(n * 4);
  DevBuf<uint8_t> g(bytes), ws(wsb);
  da.put(a.data(), n * 4);
  if (c != CodecId::kS2) {
    ASSERT_TRUE(cuda::encode(p, da.p, ElemType::kF32, n, g.p, bytes, ws.p, wsb, nullptr).ok());
    Packet gp(bytes);
    g.get(gp.data(), bytes);
    expect_same_packet(p, n, cp, gp);
  }
  std::vector<float> ycpu(n), ygpu(n);
  ASSERT_TRUE(decode(p, cp.data(), bytes, ycpu.data(), ElemType::kF32, n, 1.0f, nullptr).ok());
  g.put(cp.data(), bytes);
  for (int rep = 0; rep < 5; ++rep) {
    ASSERT_TRUE(
        cuda::decode(p, g.p, bytes, dy.p, ElemType::kF32, n, 1.0f, nullptr, ws.p, wsb, nullptr)
            .ok());
    ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
    dy.get(ygpu.data(), n * 4);
    ASSERT_EQ(0, memcmp(ycpu.data(), ygpu.data(), n * 4)) << "repetition " << rep;
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

// The multi-block prefix sum of the sparse helpers (no serial pass): compaction and scatter over
// several tiles of 2048 bitmap words (131072 elements each) against the CPU's.
// s2's unresolved positions (the engine's exact repair reads them): the GPU's bitmap of a thin
// sketch's packet equals the CPU's, and covers something.
TEST(S2Gpu, UnresolvedPositionsMatchCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 100003;
  std::vector<float> a = make_data(Dist::kSparse10, n, 3);
  a[7 * 256] = NAN;  // a non-finite block: never reported
  CodecParams p = params_for(CodecId::kS2, n / 10);
  p.s2_counters = s2_counters_for_support(n / 10, 3, 0.9);
  const size_t bytes = packet_bytes(p, n), wsb = cuda::workspace_bytes(p, n);
  Packet pkt(bytes);
  ASSERT_TRUE(encode(p, a.data(), ElemType::kF32, n, pkt.data(), bytes).ok());
  std::vector<uint64_t> cpu(detail::bitmap_words(n)), gpu(detail::bitmap_words(n));
  std::vector<float> y(n);
  DecodeStats scpu;
  scpu.unresolved = cpu.data();
  ASSERT_TRUE(decode(p, pkt.data(), bytes, y.data(), ElemType::kF32, n, 1.0f, &scpu).ok());
  DevBuf<uint8_t> g(bytes), ws(wsb);
  DevBuf<float> dy(n * 4);
  DevBuf<uint64_t> du(detail::bitmap_words(n) * 8);
  g.put(pkt.data(), bytes);
  ASSERT_TRUE(
      cuda::decode(p, g.p, bytes, dy.p, ElemType::kF32, n, 1.0f, nullptr, ws.p, wsb, nullptr, du.p)
          .ok());
  ASSERT_TRUE(cuda::read_device_error(ws.p, nullptr).ok());
  du.get(gpu.data(), gpu.size() * 8);
  EXPECT_EQ(gpu, cpu);
  size_t set = 0;
  for (uint64_t w : cpu)
    set += size_t(__builtin_popcountll(w));
  EXPECT_GT(set, 0u);
  EXPECT_LE(set, scpu.estimated);
}

TEST(SparseGpu, CompactAndScatterOverManyTilesMatchCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (size_t n : {size_t(1), size_t(131073), size_t(1000003)}) {
    SCOPED_TRACE(n);
    const std::vector<float> x = make_data(Dist::kSparse1, n, 21);
    std::vector<uint64_t> bits(bitmap_bytes(n) / 8);
    bitmap_build(x.data(), ElemType::kF32, n, bits.data());
    const size_t m = bitmap_popcount(bits.data(), n);
    std::vector<float> vals(m + 1), dvals(m + 1), y(n), dy(n);
    ASSERT_EQ(sparse_compact(bits.data(), n, x.data(), ElemType::kF32, vals.data()), m);
    ASSERT_EQ(sparse_scatter(bits.data(), n, vals.data(), 0.5f, y.data(), ElemType::kF32), m);
    const size_t wsb = cuda::sparse_workspace_bytes(n);
    DevBuf<uint64_t> db(bits.size() * 8);
    DevBuf<float> dx(n * 4), dv((m + 1) * 4), dout(n * 4);
    DevBuf<uint8_t> ws(wsb);
    db.put(bits.data(), bits.size() * 8);
    dx.put(x.data(), n * 4);
    cuda::sparse_compact(db.p, n, dx.p, ElemType::kF32, dv.p, ws.p, nullptr);
    cuda::sparse_scatter(db.p, n, dv.p, 0.5f, dout.p, ElemType::kF32, ws.p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    dv.get(dvals.data(), m * 4);
    dout.get(dy.data(), n * 4);
    EXPECT_EQ(0, memcmp(vals.data(), dvals.data(), m * 4));
    EXPECT_EQ(0, memcmp(y.data(), dy.data(), n * 4));
  }
}

// Every kernel instantiation loads (the preloading that keeps first launches off a held
// stream) and reports its local memory.
TEST(PreloadGpu, EveryKernelLoads) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  size_t local = 0;
  EXPECT_EQ(cuda::preload_kernels(&local), cudaSuccess);
#if !SKETCHCCL_EMULATED_CUDA  // the emulator cannot know what nvcc puts on a kernel's stack
  EXPECT_GT(local, 0u);       // k_casq_fit and k_s2_output keep arrays on the stack
#endif
  EXPECT_LT(local, 4096u);
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
