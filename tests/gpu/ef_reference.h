// Reference arithmetic shared by the GPU backend test and the device-free test: error
// feedback's loop as the engine wrote it before it became backend operations, and test data as
// a user's buffer holds it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/codec.h"
#include "tests/unit/kernels/codec_test_util.h"

namespace sketchccl::backend::gpu_ref {

using kernels::ElemType;

// fp16/bf16 copies of fp32 data (round to nearest even through the host conversion).
inline std::vector<uint16_t> narrow(const std::vector<float>& v, ElemType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t x;
    std::memcpy(&x, &v[i], 4);
    if (t == ElemType::kBf16) {
      out[i] = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    } else {
      // Test data is in fp16's normal range or exactly 0: truncating conversion is enough here.
      const uint32_t sign = (x >> 16) & 0x8000u;
      const int e = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
      out[i] = e <= 0 ? static_cast<uint16_t>(sign)
                      : static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) |
                                              ((x & 0x7fffffu) >> 13));
    }
  }
  return out;
}

// The engine's error-feedback loop as it was written in src/coll before it became backend
// operations: the host backend must keep its bits (convergence and the api tests rely on them).
inline void reference_ef_update(const std::vector<float>& comp, const std::vector<float>* in,
                                const std::vector<float>& out, std::vector<float>* r, double* in_sq,
                                double* res_sq) {
  *in_sq = 0;
  *res_sq = 0;
  for (size_t i = 0; i < comp.size(); ++i) {
    const float want = (in != nullptr ? (*in)[i] : 0.0f) + comp[i];
    float e = want - out[i];
    if (!std::isfinite(e)) e = 0;
    (*r)[i] = e;
    *in_sq += static_cast<double>(comp[i]) * comp[i];
    *res_sq += static_cast<double>(e) * e;
  }
}

// A decoded result with non-finite values here and there (an overflowed step).
inline std::vector<float> decoded_with_non_finite(size_t n, uint64_t seed) {
  std::vector<float> v = kernels::testing::make_data(kernels::testing::Dist::kGauss, n, seed);
  for (size_t i = 7; i < n; i += 997)
    v[i] = (i / 997) % 2 ? std::numeric_limits<float>::infinity()
                         : std::numeric_limits<float>::quiet_NaN();
  return v;
}

// The slice as the user's buffer holds it: fp32, or fp16/bf16 bytes.
inline std::vector<uint8_t> user_bytes(const std::vector<float>& v, ElemType t) {
  std::vector<uint8_t> b(v.size() * kernels::elem_size(t));
  if (t == ElemType::kF32) {
    std::memcpy(b.data(), v.data(), b.size());
  } else {
    std::vector<uint16_t> h = narrow(v, t);
    std::memcpy(b.data(), h.data(), b.size());
  }
  return b;
}

inline bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace sketchccl::backend::gpu_ref
