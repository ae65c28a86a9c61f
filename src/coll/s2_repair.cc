#include "src/coll/s2_repair.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/sparse.h"
#include "src/coll/oom.h"
#include "src/coll/ring_phase.h"

namespace sketchccl::coll {
namespace {

using kernels::ElemType;

size_t words_for(size_t n) {
  return (n + 63) / 64;
}
bool bit(const std::vector<uint64_t>& bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

// f(i) for every set bit i of `bits` (n bits), in increasing order.
template <typename F>
void for_each_bit(const uint64_t* bits, size_t n, F&& f) {
  const size_t words = words_for(n);
  for (size_t w = 0; w < words; ++w) {
    uint64_t b = bits[w];
    if (w == words - 1 && (n % 64) != 0) b &= (uint64_t(1) << (n % 64)) - 1;
    while (b != 0) {
      f(w * 64 + static_cast<size_t>(__builtin_ctzll(b)));
      b &= b - 1;
    }
  }
}

// For every set bit of `sel` (a subset of `of`, n bits) in order: f(its rank among `of`'s bits).
template <typename F>
void for_each_rank(const uint64_t* sel, const uint64_t* of, size_t n, F&& f) {
  size_t before = 0;  // set bits of `of` in the words before w
  for (size_t w = 0; w < words_for(n); ++w) {
    uint64_t s = sel[w];
    if (w == words_for(n) - 1 && (n % 64) != 0) s &= (uint64_t(1) << (n % 64)) - 1;
    while (s != 0) {
      const int b = __builtin_ctzll(s);
      const uint64_t below = b == 0 ? 0 : of[w] & ((uint64_t(1) << b) - 1);
      const bool in = ((of[w] >> b) & 1u) != 0;
      f(in, before + static_cast<size_t>(__builtin_popcountll(below)));
      s &= s - 1;
    }
    before += static_cast<size_t>(__builtin_popcountll(of[w]));
  }
}

// This rank's input at the set positions of `u` (count bits), in position order.
Status own_values(const S2RepairCall& c, const std::vector<uint64_t>& u, size_t m,
                  std::vector<float>* own) {
  SCCL_RETURN_IF_ERROR(alloc_vector(own, m, "s2 repair's input values"));
  if (c.saved == nullptr) {
    return c.be->sparse_compact(u.data(), c.count, c.send, c.type, own->data(), nullptr);
  }
  size_t k = 0;
  for_each_rank(u.data(), c.saved->bits.data(), c.count,
                [&](bool in, size_t r) { (*own)[k++] = in ? c.saved->values[r] : 0.0f; });
  return Status::Ok();
}

// recv (n elements of `type`) takes vals[k] (already scaled) at the k-th set bit of `sel`, and
// keeps every other element: compacted with its non-zeros (NaN blocks included), patched,
// scattered back, on the user buffers' backend.
Status patch(backend::Backend& be, void* recv, ElemType type, size_t n,
             const std::vector<uint64_t>& sel, const float* vals) {
  std::vector<uint64_t> keep;
  SCCL_RETURN_IF_ERROR(
      alloc_vector<uint64_t>(&keep, kernels::bitmap_bytes(n) / 8, "s2 repair's bitmap", 0));
  SCCL_RETURN_IF_ERROR(be.bitmap_build(recv, type, n, keep.data()));
  for (size_t w = 0; w < words_for(n); ++w)
    keep[w] |= sel[w];
  size_t nk = 0;
  SCCL_RETURN_IF_ERROR(be.bitmap_popcount(keep.data(), n, &nk));
  std::vector<float> out;
  SCCL_RETURN_IF_ERROR(alloc_vector(&out, nk, "s2 repair's output values"));
  SCCL_RETURN_IF_ERROR(be.sparse_compact(keep.data(), n, recv, type, out.data(), nullptr));
  size_t k = 0;
  for_each_rank(sel.data(), keep.data(), n, [&](bool, size_t r) { out[r] = vals[k++]; });
  return be.sparse_scatter(keep.data(), n, out.data(), 1.0f, recv, type, nullptr);
}

Status repair_whole(const CommLink& link, const S2RepairCall& c, const S2DecodeLog& log,
                    const S2ExactRing& exact_ring, S2RepairResult* out) {
  (void)link;
  const size_t m = log.unresolved_count();
  if (m == 0) return Status::Ok();
  std::vector<float> own, sums;
  SCCL_RETURN_IF_ERROR(own_values(c, log.unresolved(), m, &own));
  SCCL_RETURN_IF_ERROR(alloc_vector(&sums, m, "s2 repair's sums"));
  SCCL_RETURN_IF_ERROR(exact_ring(kPhaseS2Repair, own.data(), sums.data(), m, &out->bytes_sent));
  for (float& v : sums)
    v *= c.scale;
  SCCL_RETURN_IF_ERROR(patch(*c.be, c.recv, c.type, c.count, log.unresolved(), sums.data()));
  out->repaired = m;
  return Status::Ok();
}

// A ReduceScatter: each rank knows its chunk's positions. Counts, then the positions, all-gathered;
// one exact ring over all of them; each rank writes its own.
Status repair_chunks(const CommLink& link, const S2RepairCall& c, const S2DecodeLog& log,
                     const S2ExactRing& exact_ring, S2RepairResult* out) {
  const auto p = static_cast<size_t>(link.nranks);
  const auto me = static_cast<size_t>(link.rank);
  std::vector<uint64_t> mine;
  SCCL_RETURN_IF_ERROR(
      alloc_vector<uint64_t>(&mine, log.unresolved_count(), "s2 repair's positions", 0));
  size_t k0 = 0;
  for_each_bit(log.unresolved().data(), c.count, [&](size_t i) { mine[k0++] = i; });
  const uint64_t my_count = mine.size();
  std::vector<uint64_t> counts(p, 0);
  CommLink l = link;
  l.phase = kPhaseS2RepairCnt;
  SCCL_RETURN_IF_ERROR(ring_allgather_small(l, &my_count, sizeof my_count, counts.data()));
  out->bytes_sent += (p - 1) * sizeof my_count;
  uint64_t total = 0, most = 0, before = 0;
  for (size_t r = 0; r < p; ++r) {
    if (r == me) before = total;
    total += counts[r];
    most = std::max(most, counts[r]);
  }
  if (total == 0) return Status::Ok();
  // Every rank's positions, padded to the longest list.
  std::vector<uint64_t> lists;
  SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&lists, p * most, "s2 repair's positions", 0));
  mine.resize(most, 0);
  l.phase = kPhaseS2RepairPos;
  SCCL_RETURN_IF_ERROR(ring_allgather_small(l, mine.data(), most * sizeof(uint64_t), lists.data()));
  out->bytes_sent += (p - 1) * most * sizeof(uint64_t);
  std::vector<uint64_t> u;
  SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&u, words_for(c.count), "s2 repair's bitmap", 0));
  uint64_t set = 0;
  for (size_t r = 0; r < p; ++r) {
    for (uint64_t k = 0; k < counts[r]; ++k) {
      const uint64_t i = lists[r * most + k];
      if (i >= c.count) {
        return errorf(Code::kInternalError, "s2 repair: rank %zu named position %llu of %zu", r,
                      static_cast<unsigned long long>(i), c.count);
      }
      if (!bit(u, i)) set++;
      u[i / 64] |= uint64_t(1) << (i % 64);
    }
  }
  if (set != total) {
    return Status(Code::kInternalError, "s2 repair: ranks named the same position twice");
  }
  // Chunks lie in rank order and each list ascends, so the lists in rank order are u's order.
  std::vector<float> own, sums;
  SCCL_RETURN_IF_ERROR(own_values(c, u, total, &own));
  SCCL_RETURN_IF_ERROR(alloc_vector(&sums, total, "s2 repair's sums"));
  SCCL_RETURN_IF_ERROR(
      exact_ring(kPhaseS2Repair, own.data(), sums.data(), total, &out->bytes_sent));
  out->repaired = total;
  if (my_count == 0) return Status::Ok();
  std::vector<uint64_t> local;
  SCCL_RETURN_IF_ERROR(
      alloc_vector<uint64_t>(&local, words_for(c.recv_count), "s2 repair's chunk bitmap", 0));
  std::vector<float> vals(my_count);
  for (uint64_t k = 0; k < my_count; ++k) {
    const size_t i = static_cast<size_t>(mine[k]) - c.recv_first;
    local[i / 64] |= uint64_t(1) << (i % 64);
    vals[k] = sums[before + k] * c.scale;
  }
  return patch(*c.be, c.recv, c.type, c.recv_count, local, vals.data());
}

}  // namespace

uint64_t s2_slice_support_hash(const S2SliceSupport& s) {
  uint64_t h = mix(0, s.size());
  for (const auto& [offset, v] : s) {
    h = mix(h, offset);
    h = mix(h, v.first);
    h = mix(h, v.second);
  }
  return h;
}

uint32_t s2_slice_counters(const S2SliceSupport& prev, uint64_t total_support, size_t count,
                           size_t offset, size_t n, uint32_t rows, double per_nonzero) {
  const auto it = prev.find(offset);
  if (it != prev.end() && it->second.first == n) {
    return kernels::s2_counters_for_support(it->second.second, rows, per_nonzero);
  }
  // Another cut than the previous call's (not expected: the cut depends only on the count, the
  // ranks and the slice size): the total support, spread evenly.
  const double density =
      count == 0 ? 0.0 : static_cast<double>(total_support) / static_cast<double>(count);
  const auto support = static_cast<uint64_t>(std::ceil(density * static_cast<double>(n)));
  return kernels::s2_counters_for_support(support, rows, per_nonzero);
}

Status S2DecodeLog::reset(size_t count, bool unresolved) {
  want_ = unresolved;
  count_ = count;
  supports_.clear();
  unresolved_ = 0;
  bits_.clear();
  if (!unresolved) return Status::Ok();
  return alloc_vector<uint64_t>(&bits_, words_for(count), "s2 unresolved positions", 0);
}

void S2DecodeLog::record(size_t offset, size_t n, const kernels::DecodeStats& ds,
                         const uint64_t* bits) {
  supports_[offset] = {n, ds.nonzeros};
  if (!want_ || bits == nullptr || offset + n > count_) return;
  for_each_bit(bits, n, [&](size_t i) {
    const size_t g = offset + i;
    bits_[g / 64] |= uint64_t(1) << (g % 64);
    unresolved_++;
  });
}

Status s2_save_input(backend::Backend& be, const void* x, ElemType t, size_t count,
                     S2SavedInput* out) {
  SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&out->bits, kernels::bitmap_bytes(count) / 8,
                                              "s2 saved input's bitmap", 0));
  SCCL_RETURN_IF_ERROR(be.bitmap_build(x, t, count, out->bits.data()));
  size_t nz = 0;
  SCCL_RETURN_IF_ERROR(be.bitmap_popcount(out->bits.data(), count, &nz));
  SCCL_RETURN_IF_ERROR(alloc_vector(&out->values, nz, "s2 saved input's values"));
  return be.sparse_compact(out->bits.data(), count, x, t, out->values.data(), nullptr);
}

Status s2_repair(const CommLink& link, const S2RepairCall& call, const S2DecodeLog& log,
                 const S2ExactRing& exact_ring, S2RepairResult* out) {
  *out = S2RepairResult{};
  if (!log.wants_unresolved()) {
    return Status(Code::kInternalError, "s2 repair without the unresolved positions");
  }
  return call.whole ? repair_whole(link, call, log, exact_ring, out)
                    : repair_chunks(link, call, log, exact_ring, out);
}

Status s2_lossy_feedback(backend::Backend& be, const S2DecodeLog& log, void* recv, ElemType type,
                         size_t count, float* residual, double* residual_sq) {
  const size_t m = log.unresolved_count();
  std::vector<float> kept;
  SCCL_RETURN_IF_ERROR(alloc_vector(&kept, m, "s2 residual's values"));
  const std::vector<uint64_t>& u = log.unresolved();
  SCCL_RETURN_IF_ERROR(
      be.sparse_compact(u.data(), count, residual, ElemType::kF32, kept.data(), nullptr));
  double sq = 0;
  for (float v : kept)
    sq += static_cast<double>(v) * static_cast<double>(v);
  *residual_sq = sq;
  // The residual: the compensated input where the output lost it, zero where it was peeled.
  SCCL_RETURN_IF_ERROR(
      be.sparse_scatter(u.data(), count, kept.data(), 1.0f, residual, ElemType::kF32, nullptr));
  if (m == 0) return Status::Ok();
  const std::vector<float> zeros(m, 0.0f);
  return patch(be, recv, type, count, u, zeros.data());
}

}  // namespace sketchccl::coll
