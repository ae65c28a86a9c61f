// Inputs and measures shared by the two-shot schedule's tests: the settings of one fixed codec
// and schedule, Laplace inputs per rank and call, the NMSE against the exact sum.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

#include "kernels/codec_common.h"
#include "src/coll/settings.h"

namespace sketchccl::testutil {

inline coll::Settings settings_for(kernels::CodecId codec, coll::Settings::Algo algo,
                                   bool feedback = false) {
  coll::Settings s;
  s.auto_codec = false;
  s.codec = codec;
  s.algo = algo;
  s.error_feedback = feedback;
  return s;
}

// Rank r's input: Laplace values (the heavy tails of gradients), independent per rank and call.
inline std::vector<std::vector<float>> inputs(int p, size_t count, int call = 0) {
  std::vector<std::vector<float>> x(static_cast<size_t>(p), std::vector<float>(count));
  for (int r = 0; r < p; ++r) {
    std::mt19937_64 g(7919u * static_cast<unsigned>(r) + 104729u * static_cast<unsigned>(call) + 1);
    std::exponential_distribution<float> e(1.0f);
    std::bernoulli_distribution sign(0.5);
    for (float& v : x[static_cast<size_t>(r)])
      v = sign(g) ? e(g) : -e(g);
  }
  return x;
}

// NMSE of y (elements [first, first + n) of the reduction) against the exact sum of xs.
inline double nmse(const std::vector<std::vector<float>>& xs, const float* y, size_t first,
                   size_t n, double scale = 1.0) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (const auto& x : xs)
      s += x[first + i];
    s *= scale;
    err += (y[i] - s) * (y[i] - s);
    ref += s * s;
  }
  return ref > 0 ? err / ref : err;
}

}  // namespace sketchccl::testutil
