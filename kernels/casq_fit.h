// CASQ's fit: K = 2^bits clusters (K/2 per sign) by 1-D k-means (k-means++ seeding, then Lloyd
// iterations) on the sample, and the sizes of their bucket tables.
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
  float sample[kCasqSample];
  float work[2 * kCasqSample];  // negatives | positives, then squared distances
  double total;                 // k-means++: sum of squared distances
  uint32_t nn;                  // negatives in the sample
  uint32_t seeded[kCasqMaxK];   // k-means++: center c came from a pick (a flag per center, so
                                // thread 0 never rewrites a flag another thread may still read)
  float centers[kCasqMaxK];
  uint32_t sizes[kCasqMaxK];
  double stats[3][kCasqMaxK];  // per cluster: count, sum, sum of squares (table sizes)
};

// Per-lane partial sums, kCasqLanes rows of up to kCasqMaxK (40 KiB: the device keeps them in
// shared memory). sum also holds a copy of the k-means++ lane sums after the first rows.
struct CasqPartials {
  double sum[kCasqLanes * kCasqMaxK];
  uint32_t cnt[kCasqLanes * kCasqMaxK / 2];
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
template <typename Ex>
SCCL_HD_INLINE void casq_fold(Ex& ex, double* a, uint32_t* b, uint32_t w) {
  for (uint32_t h = kCasqLanes / 2; h >= 1; h /= 2) {
    ex.lanes([&](uint32_t l) {
      if (l >= h) return;
      for (uint32_t j = 0; j < w; ++j) {
        a[l * w + j] += a[(l + h) * w + j];
        if (b != nullptr) b[l * w + j] += b[(l + h) * w + j];
      }
    });
  }
}

// Inclusive prefix sums of a[0, kCasqLanes) by doubling (log2(lanes) steps; tmp is as long):
// returns the array that holds them (a or tmp).
template <typename Ex>
SCCL_HD_INLINE uint32_t* casq_lane_scan(Ex& ex, uint32_t* a, uint32_t* tmp) {
  for (uint32_t o = 1; o < kCasqLanes; o *= 2) {
    ex.lanes([&](uint32_t l) { tmp[l] = a[l] + (l >= o ? a[l - o] : 0u); });
    uint32_t* t = a;
    a = tmp;
    tmp = t;
  }
  return a;
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
  casq_fold(ex, part, nullptr, 1);
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

// k sorted centers of vals[m] into centers (f->centers + offset); d2[m] is scratch.
template <typename Ex>
SCCL_HD_INLINE void casq_kmeans(Ex& ex, const float* vals, uint32_t m, uint32_t k, uint64_t key,
                                float* d2, CasqFitScratch* f, float* centers) {
  if (m == 0) {
    ex.one([&] {
      for (uint32_t i = 0; i < k; ++i)
        centers[i] = 0.0f;
    });
    return;
  }
  ex.one([&] { centers[0] = vals[mix64(key) % m]; });
  casq_seed_distances(ex, vals, m, centers[0], true, d2, f);
  for (uint32_t c = 1; c < k; ++c) {
    ex.one([&] {
      f->seeded[c] = f->total > 0.0 ? 1u : 0u;
      if (!f->seeded[c]) {
        centers[c] = centers[c - 1];
        return;
      }
      const double u = double(mix64(key + 0x9e37ull * (c + 1)) >> 11) * (1.0 / 9007199254740992.0);
      centers[c] = vals[casq_seed_pick(d2, m, u * f->total, ex.part()->sum + kCasqLanes)];
    });
    if (f->seeded[c]) casq_seed_distances(ex, vals, m, centers[c], false, d2, f);
  }
  ex.one([&] { sort_small(centers, k); });
  double* psum = ex.part()->sum;
  uint32_t* pcnt = ex.part()->cnt;
  for (int it = 0; it < kCasqLloydIters; ++it) {
    ex.lanes([&](uint32_t l) {
      double sum[kCasqMaxK / 2];
      uint32_t cnt[kCasqMaxK / 2];
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
        pcnt[l * k + b] = cnt[b];
      }
    });
    casq_fold(ex, psum, pcnt, k);
    ex.one([&] {
      for (uint32_t b = 0; b < k; ++b) {
        if (pcnt[b]) centers[b] = float(psum[b] / pcnt[b]);
      }
      sort_small(centers, k);
    });
  }
}

// Table sizes (>= 1 each, `buckets` in all) from each cluster's share of items times spread.
SCCL_HD_INLINE void casq_sizes(const double* cnt, const double* s1, const double* s2, uint32_t K,
                               uint32_t buckets, uint32_t* sizes) {
  double w[kCasqMaxK];
  double W = 0.0, Wc = 0.0;
  for (uint32_t c = 0; c < K; ++c) {
    const double mean = cnt[c] > 0 ? s1[c] / cnt[c] : 0.0;
    const double var = cnt[c] > 0 ? s2[c] / cnt[c] - mean * mean : 0.0;
    w[c] = cnt[c] * sqrt(var > 0.0 ? var : 0.0);
    W += w[c];
    Wc += cnt[c];
  }
  if (!(W > 0.0)) {
    for (uint32_t c = 0; c < K; ++c)
      w[c] = cnt[c];
    W = Wc;
  }
  const uint32_t extra = buckets - K;
  uint32_t given = 0, best = 0;
  for (uint32_t c = 0; c < K; ++c) {
    double share = W > 0.0 ? w[c] / W : 0.0;
    share = share > 0.0 ? (share < 1.0 ? share : 1.0) : 0.0;  // also maps NaN to 0
    uint32_t e = uint32_t(double(extra) * share);
    e = e > extra - given ? extra - given : e;
    sizes[c] = 1 + e;
    given += e;
    if (w[c] > w[best]) best = c;
  }
  sizes[best] += extra - given;
}

// The whole fit on f->sample[m]: f->centers (K sorted) and f->sizes.
template <typename Ex>
SCCL_HD_INLINE void casq_fit(Ex& ex, uint32_t m, uint32_t bits, uint32_t buckets, uint64_t key,
                             CasqFitScratch* f) {
  const uint32_t K = 1u << bits, half = K / 2;
  const float* sample = f->sample;
  // Stable split by sign: negatives to work[0, nn), the rest to work[nn, m). Each lane's place
  // comes from the prefix sums of the lanes' negative counts.
  uint32_t* neg = ex.part()->cnt;
  ex.lanes([&](uint32_t l) {
    uint32_t c = 0;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i)
      c += sample[i] < 0.0f ? 1u : 0u;
    neg[l] = c;
  });
  const uint32_t* incl = casq_lane_scan(ex, neg, neg + kCasqLanes);
  ex.one([&] { f->nn = incl[kCasqLanes - 1]; });
  ex.lanes([&](uint32_t l) {
    const uint32_t before = l > 0 ? incl[l - 1] : 0u;  // negatives in lanes before l
    uint32_t a = before, b = f->nn + casq_seg(l, m) - before;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
      if (sample[i] < 0.0f) {
        f->work[a++] = sample[i];
      } else {
        f->work[b++] = sample[i];
      }
    }
  });
  const uint32_t nn = f->nn;
  float* d2 = f->work + m;
  casq_kmeans(ex, f->work, nn, half, key ^ 0x4e454700ull, d2, f, f->centers);
  casq_kmeans(ex, f->work + nn, m - nn, half, key ^ 0x504f5300ull, d2, f, f->centers + half);
  ex.one([&] { sort_small(f->centers, K); });
  // Cluster statistics on the sample decide the table sizes: count, sum and sum of squares,
  // one tree each.
  double* psum = ex.part()->sum;
  for (uint32_t q = 0; q < 3; ++q) {
    ex.lanes([&](uint32_t l) {
      double acc[kCasqMaxK];
      for (uint32_t c = 0; c < K; ++c)
        acc[c] = 0.0;
      for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
        const uint32_t c = nearest(f->centers, K, sample[i]);
        acc[c] += q == 0 ? 1.0 : q == 1 ? double(sample[i]) : double(sample[i]) * sample[i];
      }
      for (uint32_t c = 0; c < K; ++c)
        psum[l * K + c] = acc[c];
    });
    casq_fold(ex, psum, nullptr, K);
    ex.one([&] {
      for (uint32_t c = 0; c < K; ++c)
        f->stats[q][c] = psum[c];
    });
  }
  ex.one([&] { casq_sizes(f->stats[0], f->stats[1], f->stats[2], K, buckets, f->sizes); });
}

}  // namespace sketchccl::kernels::detail
