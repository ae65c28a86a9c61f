// CASQ's fit: K = 2^bits levels in [-1, 1] for values normalised by their block's scale, by 1-D
// k-means on the sample with centers pinned at -1, 1 and maybe 0 (the ends make stochastic
// rounding unbiased for every value, 0 keeps zeros exact when they are common) and the others free
// (k-means++ seeding, then Lloyd iterations).
//
// Written for kCasqLanes lanes that meet at the barriers of an executor `Ex`:
//   ex.lanes(f): f(l) for every lane l, then a barrier;  ex.one(f): f() once, then a barrier.
// The CUDA build runs it in one thread block (kernels/cuda/), the CPU build runs the lanes in a
// loop (CasqHostExec). Every sum is formed per lane over a fixed contiguous segment of the
// items, then folded by a pairwise tree over the lanes (casq_fold: lane l takes lane l + h for
// h = 128, 64, .., 1), so both builds add in the same order and compute the same bits, and no
// thread folds serially. The per-lane partials are the executor's (ex.part(): shared memory on
// the device); other state that lanes share lives in CasqFitScratch (device: global workspace),
// never in locals of one().
#pragma once

#include <math.h>

#include "kernels/codec_impl.h"

namespace sketchccl::kernels::detail {

constexpr uint32_t kCasqLanes = 256;
constexpr uint32_t kCasqMaxK = 16;

// Lane l's segment [casq_seg(l, m), casq_seg(l + 1, m)) of m items.
SCCL_HD_INLINE uint32_t casq_seg(uint32_t l, uint32_t m) {
  return uint32_t(uint64_t(l) * m / kCasqLanes);
}

struct CasqFitScratch {
  float sample[kCasqSample];   // normalised values
  float work[kCasqSample];     // k-means++: squared distances
  double total;                // k-means++: sum of squared distances
  uint32_t seeded[kCasqMaxK];  // k-means++: center c came from a pick (a flag per center, so
                               // thread 0 never rewrites a flag another thread may still read)
  float centers[kCasqMaxK];    // the levels, sorted
  float inv[kCasqMaxK];        // casq_steps of the levels
  uint32_t pinned;             // centers pinned (casq_kmeans)
};

// Per-lane partial sums, kCasqLanes rows of up to kCasqMaxK (40 KiB: the device keeps them in
// shared memory). sum also holds a copy of the k-means++ lane sums after the first rows.
struct CasqPartials {
  double sum[kCasqLanes * kCasqMaxK];
  uint16_t cnt[kCasqLanes * kCasqMaxK];  // counts of at most kCasqSample
};

// The CPU's executor: lanes one after another.
struct CasqHostExec {
  CasqPartials* partials;
  CasqPartials* part() { return partials; }
  template <typename F>
  void lanes(F&& f) {
    for (uint32_t l = 0; l < kCasqLanes; ++l)
      f(l);
  }
  template <typename F>
  void one(F&& f) {
    f();
  }
};

// Folds rows of w values (a[l * w + j], and b's likewise when not null) into row 0 by the
// pairwise tree over the lanes: the fixed order of both builds.
template <typename Ex, typename C>
SCCL_HD_INLINE void casq_fold(Ex& ex, double* a, C* b, uint32_t w) {
  for (uint32_t h = kCasqLanes / 2; h >= 1; h /= 2) {
    ex.lanes([&](uint32_t l) {
      if (l >= h) return;
      for (uint32_t j = 0; j < w; ++j) {
        if (a != nullptr) a[l * w + j] += a[(l + h) * w + j];
        if (b != nullptr) b[l * w + j] = C(b[l * w + j] + b[(l + h) * w + j]);
      }
    });
  }
}

// d2[i] = min(d2[i], (vals[i] - c)^2) (or = when first), then f->total = their sum; the lane
// sums stay in part->sum[kCasqLanes + l] for the pick.
template <typename Ex>
SCCL_HD_INLINE void casq_seed_distances(Ex& ex, const float* vals, uint32_t m, float c, bool first,
                                        float* d2, CasqFitScratch* f) {
  double* part = ex.part()->sum;
  ex.lanes([&](uint32_t l) {
    double s = 0.0;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
      const float d = vals[i] - c;
      const float dd = d * d;
      d2[i] = first || dd < d2[i] ? dd : d2[i];
      s += d2[i];
    }
    part[l] = s;
    part[kCasqLanes + l] = s;
  });
  casq_fold(ex, part, static_cast<uint16_t*>(nullptr), 1);
  ex.one([&] { f->total = part[0]; });
}

// k-means++ pick: the first item whose running sum of d2 exceeds `target` (the last if none),
// skipping whole lanes by their sums (lane_sum[l]).
SCCL_HD_INLINE uint32_t casq_seed_pick(const float* d2, uint32_t m, double target,
                                       const double* lane_sum) {
  double acc = 0.0;
  for (uint32_t l = 0; l < kCasqLanes; ++l) {
    if (acc + lane_sum[l] > target) {
      double a = acc;
      for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
        a += d2[i];
        if (a > target) return i;
      }
    }
    acc += lane_sum[l];
  }
  return m - 1;
}

// The pinned centers: -1 and 1, then 0 when exact zeros are common (casq_kmeans).
SCCL_HD_INLINE float casq_pinned(uint32_t c) {
  return c == 0 ? -1.0f : (c == 1 ? 1.0f : 0.0f);
}

// k centers of vals[m] into centers (unsorted): -1 and 1 pinned, 0 pinned too when at least 1/8
// of the values are exact zeros (sparse gradients: zeros stay exact), the others fitted; d2[m] is
// scratch.
template <typename Ex>
SCCL_HD_INLINE void casq_kmeans(Ex& ex, const float* vals, uint32_t m, uint32_t k, uint64_t key,
                                float* d2, CasqFitScratch* f, float* centers) {
  uint16_t* zeros = ex.part()->cnt;
  ex.lanes([&](uint32_t l) {
    uint32_t z = 0;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i)
      z += vals[i] == 0.0f ? 1u : 0u;
    zeros[l] = uint16_t(z);
  });
  casq_fold(ex, static_cast<double*>(nullptr), zeros, 1);
  ex.one([&] {
    f->pinned = m > 0 && 2u * zeros[0] >= m ? 3u : 2u;
    for (uint32_t c = 0; c < k; ++c)
      centers[c] = casq_pinned(c);
  });
  const uint32_t np = f->pinned;
  if (m == 0) return;
  for (uint32_t c = 0; c < np; ++c)
    casq_seed_distances(ex, vals, m, centers[c], c == 0, d2, f);
  for (uint32_t c = np; c < k; ++c) {
    ex.one([&] {
      f->seeded[c] = f->total > 0.0 ? 1u : 0u;
      if (!f->seeded[c]) return;  // every value sits on a center: keep 0
      const double u = double(mix64(key + 0x9e37ull * (c + 1)) >> 11) * (1.0 / 9007199254740992.0);
      centers[c] = vals[casq_seed_pick(d2, m, u * f->total, ex.part()->sum + kCasqLanes)];
    });
    if (f->seeded[c]) casq_seed_distances(ex, vals, m, centers[c], false, d2, f);
  }
  double* psum = ex.part()->sum;
  uint16_t* pcnt = ex.part()->cnt;
  for (int it = 0; it < kCasqLloydIters; ++it) {
    ex.lanes([&](uint32_t l) {
      double sum[kCasqMaxK];
      uint32_t cnt[kCasqMaxK];
      for (uint32_t b = 0; b < k; ++b) {
        sum[b] = 0.0;
        cnt[b] = 0;
      }
      for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
        const uint32_t b = nearest(centers, k, vals[i]);
        sum[b] += vals[i];
        cnt[b]++;
      }
      for (uint32_t b = 0; b < k; ++b) {
        psum[l * k + b] = sum[b];
        pcnt[l * k + b] = uint16_t(cnt[b]);
      }
    });
    casq_fold(ex, psum, pcnt, k);
    ex.one([&] {
      for (uint32_t b = np; b < k; ++b) {
        if (pcnt[b]) centers[b] = float(psum[b] / pcnt[b]);
      }
    });
  }
}

// The whole fit on f->sample[m] (normalised values): f->centers (K sorted levels, from -1 to 1)
// and f->inv.
template <typename Ex>
SCCL_HD_INLINE void casq_fit(Ex& ex, uint32_t m, uint32_t bits, uint64_t key, CasqFitScratch* f) {
  casq_kmeans(ex, f->sample, m, 1u << bits, key ^ 0x4c564c00ull, f->work, f, f->centers);
  ex.one([&] {
    sort_small(f->centers, 1u << bits);
    casq_steps(f->centers, 1u << bits, f->inv);
  });
}

}  // namespace sketchccl::kernels::detail
