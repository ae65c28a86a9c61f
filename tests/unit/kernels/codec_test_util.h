// Shared helpers of the codec tests: inputs, reference sums, error measures, packet chains.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_common.h"

namespace sketchccl::kernels::testing {

inline const std::vector<CodecId>& all_codecs() {
  static const std::vector<CodecId> v = {
      CodecId::kNone, CodecId::kBf16,  CodecId::kFp16,  CodecId::kQ8,    CodecId::kQ4,
      CodecId::kQ2,   CodecId::kCasq2, CodecId::kCasq3, CodecId::kCasq4, CodecId::kS2,
      CodecId::kQ8r,  CodecId::kQ4r,   CodecId::kQ2r};
  return v;
}

// Packet storage with the 8-byte alignment codecs require.
struct Packet {
  std::vector<uint64_t> words;
  size_t bytes = 0;
  explicit Packet(size_t b = 0) : words((b + 7) / 8 + 1, 0), bytes(b) {}
  void* data() { return words.data(); }
  const void* data() const { return words.data(); }
  std::vector<uint8_t> raw() const {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(words.data());
    return std::vector<uint8_t>(p, p + bytes);
  }
};

enum class Dist { kGauss, kLaplace, kSparse1, kSparse10 };

inline std::vector<float> make_data(Dist d, size_t n, uint64_t seed) {
  std::mt19937_64 g(seed * 7919 + 17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::exponential_distribution<float> expo(1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> v(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    switch (d) {
      case Dist::kGauss:
        v[i] = normal(g);
        break;
      case Dist::kLaplace:
        v[i] = (uni(g) < 0.5f ? -1.0f : 1.0f) * expo(g);
        break;
      case Dist::kSparse1:
        v[i] = uni(g) < 0.01f ? normal(g) : 0.0f;
        break;
      case Dist::kSparse10:
        v[i] = uni(g) < 0.10f ? normal(g) : 0.0f;
        break;
    }
  }
  return v;
}

// Parameters for tests: s2 gets 1.3 counters per non-zero of `support` (all rows).
inline CodecParams params_for(CodecId c, size_t support, uint64_t seed = 1) {
  CodecParams p;
  p.codec = c;
  p.seed = seed;
  p.call = 3;
  p.offset_key = 2;
  p.s2_rows = 3;
  p.s2_counters = s2_counters_for_support(support, 3, 1.3);
  return p;
}

// Encodes xs[0], steps xs[1..], returns the final packet (asserting success via ok).
inline Packet run_chain(CodecParams p, const std::vector<std::vector<float>>& xs, size_t n,
                        bool* ok, std::vector<Packet>* all = nullptr) {
  size_t bytes = packet_bytes(p, n);
  Packet cur(bytes);
  p.step = 0;
  *ok = encode(p, xs[0].data(), ElemType::kF32, n, cur.data(), bytes).ok();
  if (all) all->push_back(cur);
  for (size_t k = 1; k < xs.size() && *ok; ++k) {
    Packet next(bytes);
    p.step = uint32_t(k);
    *ok = step(p, cur.data(), bytes, xs[k].data(), ElemType::kF32, n, next.data(), bytes).ok();
    cur = next;
    if (all) all->push_back(cur);
  }
  return cur;
}

inline double nmse(const std::vector<float>& ref, const std::vector<float>& got) {
  double e = 0, s = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = double(got[i]) - ref[i];
    e += d * d;
    s += double(ref[i]) * ref[i];
  }
  return s > 0 ? e / s : e;
}

inline std::vector<float> seq_sum(const std::vector<std::vector<float>>& xs) {
  std::vector<float> s(xs[0]);
  for (size_t k = 1; k < xs.size(); ++k) {
    for (size_t i = 0; i < s.size(); ++i)
      s[i] = s[i] + xs[k][i];
  }
  return s;
}

}  // namespace sketchccl::kernels::testing
