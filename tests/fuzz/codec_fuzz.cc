// Fuzzes every codec's packet decoder and ring step (kernels/codec.h), and the sparse helpers.
// Byte 0 picks the codec, byte 1 the mode and element type, bytes 2-5 the element count and the
// s2 budget; the rest is either a raw packet (mode 0), values to encode (mode 1), or values to
// encode followed by a corruption of the valid packet (mode 2). Valid packets must decode;
// anything else must be rejected or decoded without reading out of bounds (ASan) or UB (UBSan).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/codec.h"
#include "kernels/sparse.h"

namespace sk = sketchccl::kernels;

namespace {

void fuzz_sparse(const uint8_t* data, size_t size, size_t n) {
  std::vector<uint64_t> bm(sk::bitmap_bytes(n) / 8 + 1, 0);
  memcpy(bm.data(), data, std::min(size, sk::bitmap_bytes(n)));
  size_t m = sk::bitmap_popcount(bm.data(), n);
  std::vector<float> x(n + 1, 1.0f), vals(m + 1);
  if (sk::sparse_compact(bm.data(), n, x.data(), sk::ElemType::kF32, vals.data()) != m) {
    __builtin_trap();
  }
  std::vector<uint16_t> y(n + 1);
  if (sk::sparse_scatter(bm.data(), n, vals.data(), 1.0f, y.data(), sk::ElemType::kBf16) != m) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const int codec = data[0] % 11;
  const int mode = data[1] % 3;
  const sk::ElemType t = sk::ElemType(data[1] / 3 % 3);
  size_t n = (size_t(data[2]) | size_t(data[3]) << 8) % 3000;
  sk::CodecParams p;
  p.codec = sk::CodecId(codec);
  p.seed = data[4];
  p.s2_rows = 1 + data[4] % 8;
  p.s2_counters = 1 + data[5] * 4u;
  p.casq_nearest = (data[5] & 4) != 0;
  data += 6;
  size = size - 6;
  if (p.codec == sk::CodecId::kSparse) {
    fuzz_sparse(data, size, n);
    return 0;
  }
  const size_t esz = sk::elem_size(t);
  std::vector<uint64_t> pkt, out;
  size_t bytes = 0;
  std::vector<uint8_t> x;
  if (mode == 0) {
    bytes = size;
    pkt.assign(size / 8 + 1, 0);
    memcpy(pkt.data(), data, size);
    x.assign(n * esz + 1, 0);
  } else {
    n = std::min(n, size / esz);
    x.assign(data, data + n * esz);
    x.push_back(0);
    bytes = sk::packet_bytes(p, n);
    pkt.assign(bytes / 8 + 1, 0);
    if (!sk::encode(p, x.data(), t, n, pkt.data(), bytes).ok()) __builtin_trap();
    if (mode == 2 && bytes > 0 && size > n * esz + 2) {
      const uint8_t* c = data + n * esz;  // corruption: offset, value
      reinterpret_cast<uint8_t*>(pkt.data())[(size_t(c[0]) | size_t(c[1]) << 8) % bytes] ^=
          uint8_t(c[2] | 1);
    }
  }
  std::vector<uint8_t> y(n * 4 + 1);
  sk::DecodeStats st;
  sketchccl::Status d = sk::decode(p, pkt.data(), bytes, y.data(), t, n, 0.5f, &st);
  if (mode == 1 && !d.ok()) __builtin_trap();  // a valid packet must decode
  p.step = 1;
  out.assign(bytes / 8 + 1, 0);
  sketchccl::Status s = sk::step(p, pkt.data(), bytes, x.data(), t, n, out.data(), bytes);
  if (mode == 1 && !s.ok()) __builtin_trap();
  if (s.ok() && !sk::decode(p, out.data(), bytes, y.data(), t, n, 1.0f, &st).ok()) {
    __builtin_trap();  // what step produced must decode
  }
  return 0;
}
