// CASQ's fit: K = 2^bits levels in [-1, 1] for values normalised by their block's scale, by 1-D
// k-means on the sample with centers pinned at -1, 1 and maybe 0 (the ends make stochastic
// rounding unbiased for every value, 0 keeps zeros exact when they are common) and the others free
// (k-means++ seeding, then Lloyd iterations). A step starts instead from the levels of the
// incoming packet (they travel in it, so the fit depends only on data the stepping rank has):
// the partial sum's distribution moves little from one rank to the next, and a few Lloyd
// iterations from there replace the seeding and most of the iterations.
//
// Every sum of the fit is an integer: squared distances and sample values in fixed point, counts.
// Integer sums do not depend on the order of the additions, so the two drivers may add as suits
// them and still agree bit for bit:
//   - casq_fit(ex, ...): kCasqLanes lanes meeting at the barriers of an executor `Ex`
//     (ex.lanes(f): f(l) for every lane l, then a barrier; ex.one(f): f() once, then a barrier),
//     each lane summing a contiguous segment, the lanes folded by a pairwise tree. The CUDA build
//     runs it in one thread block (kernels/cuda/); the tests run it on the CPU too.
//   - casq_fit_flat(...): the CPU build's, flat loops over the whole sample that the compiler
//     vectorizes (tests/unit/kernels/casq_fit_test.cc checks both give the same levels).
// The rest (the seeding's draws and picks, the pinned centers, the assignment to the nearest
// center, the means) is the same SCCL_HD code in both.
#pragma once

#include "kernels/codec_impl.h"

namespace sketchccl::kernels::detail {

constexpr uint32_t kCasqLanes = 256;
constexpr float kCasqFixScale = 1073741824.0f;  // sample values as int32 in units of 2^-30
constexpr float kCasqD2Scale = 16777216.0f;     // squared distances (<= 4) in units of 2^-24

// Lane l's segment [casq_seg(l, m), casq_seg(l + 1, m)) of m items.
SCCL_HD_INLINE uint32_t casq_seg(uint32_t l, uint32_t m) {
  return uint32_t(uint64_t(l) * m / kCasqLanes);
}

struct CasqFitScratch {
  float sample[kCasqSample];   // normalised values
  int32_t fixed[kCasqSample];  // the same in fixed point (casq_fixed)
  uint32_t d2[kCasqSample];    // k-means++: squared distances to the nearest center, fixed
  uint64_t total;              // k-means++: their sum
  uint32_t seeded[kCasqMaxK];  // k-means++: center c came from a pick (a flag per center, so
                               // thread 0 never rewrites a flag another thread may still read)
  float centers[kCasqMaxK];    // the levels (sorted at the end)
  uint32_t pinned_mask;        // bit c: centers[c] is pinned (follows the sorts)
  float mids[kCasqMaxK];       // Lloyd: midpoints of the sorted centers
  uint32_t pinned;             // centers pinned (casq_kmeans)
};

// Per-lane partial sums, kCasqLanes rows of up to kCasqMaxK (40 KiB: the device keeps them in
// shared memory). sum also holds a copy of the k-means++ lane sums after the first rows.
struct CasqPartials {
  int64_t sum[kCasqLanes * kCasqMaxK];
  uint16_t cnt[kCasqLanes * kCasqMaxK];  // counts of at most kCasqSample
};

// The CPU's executor of the lane-structured fit: lanes one after another.
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

// ---- the shared pieces --------------------------------------------------------------------------
SCCL_HD_TINY int32_t casq_fixed(float u) {
  return int32_t(u * kCasqFixScale);  // |u| <= 1: exact scaling, then truncation
}
SCCL_HD_TINY uint32_t casq_d2(float u, float c) {
  const float d = u - c;
  return uint32_t(int32_t(d * d * kCasqD2Scale));  // |d| <= 2: at most 2^26
}
// The pinned centers: -1 and 1, then 0 when exact zeros are common (casq_kmeans).
SCCL_HD_INLINE float casq_pinned(uint32_t c) {
  return c == 0 ? -1.0f : (c == 1 ? 1.0f : 0.0f);
}
// How many centers are pinned: 0 too when at least half of the m values are exact zeros.
SCCL_HD_INLINE uint32_t casq_pinned_count(uint32_t m, uint32_t zeros) {
  return m > 0 && 2u * zeros >= m ? 3u : 2u;
}
// k-means++'s target for center c: a uniform fraction (26 bits, from the hash) of the total.
SCCL_HD_INLINE uint64_t casq_seed_target(uint64_t key, uint32_t c, uint64_t total) {
  return ((mix64(key + 0x9e37ull * (c + 1)) >> 38) * total) >> 26;  // total < 2^38
}
// The pick: the first item whose running sum of d2 exceeds target (< the sum of all, so one
// exists), skipping whole lanes by their sums lane_sum[l] when given (null: one scan).
SCCL_HD_INLINE uint32_t casq_seed_pick(const uint32_t* d2, uint32_t m, uint64_t target,
                                       const int64_t* lane_sum) {
  uint64_t acc = 0;
  uint32_t i = 0;
  for (uint32_t l = 0; lane_sum != nullptr && l < kCasqLanes; ++l) {
    if (acc + uint64_t(lane_sum[l]) > target) break;
    acc += uint64_t(lane_sum[l]);
    i = casq_seg(l + 1, m);
  }
  for (; i < m; ++i) {
    acc += d2[i];
    if (acc > target) return i;
  }
  return m - 1;
}
// Sorts the k centers (insertion sort: stable), their pinned bits alongside, and sets the
// Lloyd midpoints: a value goes to center c when mids[c - 1] < u <= mids[c].
SCCL_HD_INLINE void casq_sort_centers(CasqFitScratch* f, uint32_t k) {
  for (uint32_t i = 1; i < k; ++i) {
    const float v = f->centers[i];
    const uint32_t pin = (f->pinned_mask >> i) & 1u;
    uint32_t j = i;
    while (j > 0 && f->centers[j - 1] > v) {
      f->centers[j] = f->centers[j - 1];
      f->pinned_mask = (f->pinned_mask & ~(1u << j)) | (((f->pinned_mask >> (j - 1)) & 1u) << j);
      --j;
    }
    f->centers[j] = v;
    f->pinned_mask = (f->pinned_mask & ~(1u << j)) | (pin << j);
  }
  for (uint32_t c = 0; c + 1 < k; ++c)
    f->mids[c] = (f->centers[c] + f->centers[c + 1]) * 0.5f;
}
// Index of the center nearest u (ties to the lower): the midpoints below u.
SCCL_HD_TINY uint32_t casq_assign(float u, const float* mids, uint32_t k) {
  uint32_t b = 0;
  for (uint32_t c = 0; c + 1 < k; ++c)
    b += u > mids[c] ? 1u : 0u;
  return b;
}
// A free center's new place: the mean of its values (sum in units of 2^-30, cnt > 0).
SCCL_HD_INLINE float casq_mean(int64_t sum, uint32_t cnt) {
  return float(double(sum) / double(cnt) * (1.0 / 1073741824.0));
}
// The initial centers: the pinned ones first (bits of pinned_mask), the others 0 until seeded.
SCCL_HD_INLINE void casq_init_centers(CasqFitScratch* f, uint32_t m, uint32_t zeros, uint32_t k) {
  f->pinned = casq_pinned_count(m, zeros);
  f->pinned_mask = (1u << f->pinned) - 1u;
  for (uint32_t c = 0; c < k; ++c)
    f->centers[c] = c < f->pinned ? casq_pinned(c) : 0.0f;
}
// The initial centers of a warm start: the k levels of a received packet (any floats: NaN
// becomes 0, the rest is clamped to [-1, 1], then sorted), the ends pinned at -1 and 1 and, when
// 0 is pinned, the level nearest 0 (the lowest on a tie) moved there and pinned.
SCCL_HD_INLINE void casq_warm_centers(CasqFitScratch* f, const float* warm, uint32_t m,
                                      uint32_t zeros, uint32_t k) {
  f->pinned = casq_pinned_count(m, zeros);
  for (uint32_t c = 0; c < k; ++c) {
    const float w = warm[c];
    f->centers[c] = w == w ? (w < -1.0f ? -1.0f : (w > 1.0f ? 1.0f : w)) : 0.0f;
  }
  sort_small(f->centers, k);
  f->centers[0] = -1.0f;
  f->centers[k - 1] = 1.0f;
  f->pinned_mask = 1u | (1u << (k - 1));
  if (f->pinned == 3) {
    uint32_t z = 1;
    for (uint32_t c = 2; c + 1 < k; ++c) {
      const float a = f->centers[c] < 0.0f ? -f->centers[c] : f->centers[c];
      const float b = f->centers[z] < 0.0f ? -f->centers[z] : f->centers[z];
      z = a < b ? c : z;
    }
    f->centers[z] = 0.0f;
    f->pinned_mask |= 1u << z;
  }
}

// ---- the lane-structured fit (the CUDA build's)
// ---------------------------------------------------

// Folds rows of w values (a[l * w + j], and b's likewise when not null) into row 0 by the
// pairwise tree over the lanes.
template <typename Ex, typename C>
SCCL_HD_INLINE void casq_fold(Ex& ex, int64_t* a, C* b, uint32_t w) {
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

// d2[i] = min(d2[i], casq_d2(vals[i], c)) (or = when first), then f->total = their sum; the
// lane sums stay in part->sum[kCasqLanes + l] for the pick.
template <typename Ex>
SCCL_HD_INLINE void casq_seed_distances(Ex& ex, uint32_t m, float c, bool first,
                                        CasqFitScratch* f) {
  int64_t* part = ex.part()->sum;
  ex.lanes([&](uint32_t l) {
    uint64_t s = 0;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
      const uint32_t d = casq_d2(f->sample[i], c);
      f->d2[i] = first || d < f->d2[i] ? d : f->d2[i];
      s += f->d2[i];
    }
    part[l] = int64_t(s);
    part[kCasqLanes + l] = int64_t(s);
  });
  casq_fold(ex, part, static_cast<uint16_t*>(nullptr), 1);
  ex.one([&] { f->total = uint64_t(part[0]); });
}

// The whole fit on f->sample[m] (normalised values): f->centers, K sorted levels from -1 to 1.
// warm: the incoming packet's levels (a step), or null (encode: k-means++ seeds).
template <typename Ex>
SCCL_HD_INLINE void casq_fit(Ex& ex, uint32_t m, uint32_t bits, uint64_t key, const float* warm,
                             CasqFitScratch* f) {
  const uint32_t k = 1u << bits;
  key ^= 0x4c564c00ull;
  uint16_t* zeros = ex.part()->cnt;
  ex.lanes([&](uint32_t l) {
    uint32_t z = 0;
    for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
      z += f->sample[i] == 0.0f ? 1u : 0u;
      f->fixed[i] = casq_fixed(f->sample[i]);
    }
    zeros[l] = uint16_t(z);
  });
  casq_fold(ex, static_cast<int64_t*>(nullptr), zeros, 1);
  ex.one([&] {
    if (warm != nullptr) {
      casq_warm_centers(f, warm, m, zeros[0], k);
    } else {
      casq_init_centers(f, m, zeros[0], k);
    }
  });
  const uint32_t np = f->pinned;
  if (m > 0) {
    for (uint32_t c = 0; c < np && warm == nullptr; ++c)
      casq_seed_distances(ex, m, f->centers[c], c == 0, f);
    for (uint32_t c = np; c < k && warm == nullptr; ++c) {
      ex.one([&] {
        f->seeded[c] = f->total > 0 ? 1u : 0u;
        if (!f->seeded[c]) return;  // every value sits on a center: keep 0
        const uint64_t t = casq_seed_target(key, c, f->total);
        f->centers[c] = f->sample[casq_seed_pick(f->d2, m, t, ex.part()->sum + kCasqLanes)];
      });
      if (f->seeded[c]) casq_seed_distances(ex, m, f->centers[c], false, f);
    }
    int64_t* psum = ex.part()->sum;
    uint16_t* pcnt = ex.part()->cnt;
    const int iters = warm != nullptr ? kCasqWarmIters : kCasqLloydIters;
    for (int it = 0; it < iters; ++it) {
      ex.one([&] { casq_sort_centers(f, k); });
      ex.lanes([&](uint32_t l) {
        int64_t sum[kCasqMaxK];
        uint32_t cnt[kCasqMaxK];
        for (uint32_t b = 0; b < k; ++b) {
          sum[b] = 0;
          cnt[b] = 0;
        }
        for (uint32_t i = casq_seg(l, m); i < casq_seg(l + 1, m); ++i) {
          const uint32_t b = casq_assign(f->sample[i], f->mids, k);
          sum[b] += f->fixed[i];
          cnt[b]++;
        }
        for (uint32_t b = 0; b < k; ++b) {
          psum[l * k + b] = sum[b];
          pcnt[l * k + b] = uint16_t(cnt[b]);
        }
      });
      casq_fold(ex, psum, pcnt, k);
      ex.one([&] {
        for (uint32_t b = 0; b < k; ++b) {
          if (!((f->pinned_mask >> b) & 1u) && pcnt[b]) f->centers[b] = casq_mean(psum[b], pcnt[b]);
        }
      });
    }
  }
  ex.one([&] { casq_sort_centers(f, k); });
}

// ---- the CPU build's fit: the same arithmetic, flat loops
// ------------------------------------------- (always inlined into the build's cloned drivers,
// kernels/host/codec_host.cc)
SCCL_CPU_INLINE void casq_flat_distances(uint32_t m, float c, bool first, CasqFitScratch* f) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < m; ++i) {
    const uint32_t d = casq_d2(f->sample[i], c);
    const uint32_t o = f->d2[i];
    f->d2[i] = first || d < o ? d : o;
    s += f->d2[i];
  }
  f->total = s;
}

// Sums of the fixed-point values and counts of the items assigned to center b, for every free b.
template <uint32_t K>
SCCL_CPU_INLINE void casq_flat_lloyd_sums(uint32_t m, const CasqFitScratch* f, int64_t* sum,
                                          uint32_t* cnt) {
  uint8_t idx[kCasqSample];
  for (uint32_t i = 0; i < m; ++i)
    idx[i] = uint8_t(casq_assign(f->sample[i], f->mids, K));
  for (uint32_t b = 0; b < K; ++b) {
    sum[b] = 0;
    cnt[b] = 0;
    if ((f->pinned_mask >> b) & 1u) continue;
    int64_t s = 0;
    uint32_t c = 0;
    for (uint32_t i = 0; i < m; ++i) {
      const bool in = idx[i] == b;
      s += in ? int64_t(f->fixed[i]) : 0;
      c += in ? 1u : 0u;
    }
    sum[b] = s;
    cnt[b] = c;
  }
}

template <uint32_t K>
SCCL_CPU_INLINE void casq_fit_flat(uint32_t m, uint64_t key, const float* warm, CasqFitScratch* f) {
  key ^= 0x4c564c00ull;
  uint32_t zeros = 0;
  for (uint32_t i = 0; i < m; ++i) {
    zeros += f->sample[i] == 0.0f ? 1u : 0u;
    f->fixed[i] = casq_fixed(f->sample[i]);
  }
  if (warm != nullptr) {
    casq_warm_centers(f, warm, m, zeros, K);
  } else {
    casq_init_centers(f, m, zeros, K);
  }
  const uint32_t np = f->pinned;
  if (m > 0) {
    if (warm == nullptr) {
      for (uint32_t c = 0; c < np; ++c)
        casq_flat_distances(m, f->centers[c], c == 0, f);
      for (uint32_t c = np; c < K; ++c) {
        if (f->total == 0) break;  // every value sits on a center: the rest stay 0
        const uint64_t t = casq_seed_target(key, c, f->total);
        f->centers[c] = f->sample[casq_seed_pick(f->d2, m, t, nullptr)];
        casq_flat_distances(m, f->centers[c], false, f);
      }
    }
    const int iters = warm != nullptr ? kCasqWarmIters : kCasqLloydIters;
    for (int it = 0; it < iters; ++it) {
      casq_sort_centers(f, K);
      int64_t sum[K];
      uint32_t cnt[K];
      casq_flat_lloyd_sums<K>(m, f, sum, cnt);
      for (uint32_t b = 0; b < K; ++b) {
        if (!((f->pinned_mask >> b) & 1u) && cnt[b]) f->centers[b] = casq_mean(sum[b], cnt[b]);
      }
    }
  }
  casq_sort_centers(f, K);
}

}  // namespace sketchccl::kernels::detail
