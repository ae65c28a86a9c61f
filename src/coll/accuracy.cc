#include "src/coll/accuracy.h"

#include <algorithm>
#include <cmath>

namespace sketchccl::coll {

using kernels::CodecId;

size_t sample_count(size_t count, size_t stride) {
  return std::min(count, std::max(kMinSamples, count / stride));
}

namespace {
constexpr double kHugeError = 1e300;
// splitmix64's finalizer: a well-mixed 64-bit hash of the (seed, call, stratum) key.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// floor(k count / m) without overflow (k <= m).
size_t stratum_start(size_t k, size_t count, size_t m) {
  return k * (count / m) + (k * (count % m)) / m;
}
}  // namespace

void sample_bitmap(uint64_t seed, uint32_t call, size_t count, std::vector<uint64_t>* bits,
                   size_t stride) {
  bits->assign((count + 63) / 64, 0);
  const size_t m = sample_count(count, stride);
  const uint64_t key = mix(mix(seed ^ 0x4143435552414359ull) ^ call);
  for (size_t k = 0; k < m; ++k) {
    // Stratum k is [k count / m, (k+1) count / m): never empty since m <= count.
    const size_t lo = stratum_start(k, count, m);
    const size_t hi = stratum_start(k + 1, count, m);
    const size_t pos = lo + static_cast<size_t>(mix(key ^ k) % (hi - lo));
    (*bits)[pos / 64] |= uint64_t(1) << (pos % 64);
  }
}

SampleTally tally_samples(const float* decoded, const float* exact, size_t n) {
  SampleTally t;
  t.samples = n;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(decoded[i]) - static_cast<double>(exact[i]);
    t.err += d * d;
    t.ref += static_cast<double>(exact[i]) * exact[i];
    t.max_err = std::max(t.max_err, std::fabs(d));
    t.max_ref = std::max(t.max_ref, std::fabs(static_cast<double>(exact[i])));
  }
  return t;
}

AccuracyEstimate estimate_of(const SampleTally* tallies, size_t n) {
  SampleTally all;
  for (size_t i = 0; i < n; ++i) {
    const SampleTally& t = tallies[i];
    all.samples += t.samples;
    all.err += t.err;
    all.ref += t.ref;
    all.max_err = std::max(all.max_err, t.max_err);
    all.max_ref = std::max(all.max_ref, t.max_ref);
  }
  AccuracyEstimate e;
  e.samples = static_cast<size_t>(all.samples);
  e.nmse = all.ref > 0 ? all.err / all.ref : all.err;
  e.maxrel = all.max_ref > 0 ? all.max_err / all.max_ref : all.max_err;
  // A non-finite decoded value is a huge error, never a NaN that compares false (and finite, so
  // that the statistics stay JSON numbers).
  if (!std::isfinite(e.nmse)) e.nmse = kHugeError;
  if (!std::isfinite(e.maxrel)) e.maxrel = kHugeError;
  return e;
}

AccuracyEstimate estimate_accuracy(const float* decoded, const float* exact, size_t n) {
  const SampleTally t = tally_samples(decoded, exact, n);
  return estimate_of(&t, 1);
}

bool is_lossy(CodecId c) {
  const kernels::CodecInfo* info = kernels::codec_info(c);
  return info != nullptr && info->lossy;
}

CodecId safer_codec(CodecId c) {
  const kernels::CodecInfo* info = kernels::codec_info(c);
  return info != nullptr ? info->safer : c;
}

CodecId guarded_codec(CodecId c, int steps) {
  for (int i = 0; i < steps && is_lossy(c); ++i)
    c = safer_codec(c);
  return c;
}

bool guard_step_up(double max_nmse, CodecId ran, double nmse, GuardState* state) {
  if (max_nmse <= 0 || !is_lossy(ran) || !(nmse > max_nmse)) return false;
  state->steps++;
  return true;
}

}  // namespace sketchccl::coll
