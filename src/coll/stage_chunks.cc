#include "src/coll/stage_chunks.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "src/coll/ring.h"

namespace sketchccl::coll {
namespace {

// The chunks of `bytes` cut in `chunk`, sorted by key(element offset of the chunk's start).
template <class Key>
std::vector<int> sorted_chunks(size_t bytes, size_t chunk, size_t esz, Key key) {
  std::vector<std::pair<decltype(key(size_t(0))), int>> keyed;
  for (size_t at = 0, k = 0; at < bytes; at += chunk, ++k)
    keyed.emplace_back(key(at / esz), static_cast<int>(k));
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> order;
  for (const auto& k : keyed)
    order.push_back(k.second);
  return order;
}

// The ring chunk of `plan` holding element e.
int ring_chunk_of(const RingPlan& plan, int nranks, size_t e) {
  int c = 0;
  while (c + 1 < nranks && plan.chunk_offset(c + 1) <= e)
    ++c;
  return c;
}

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

}  // namespace

backend::StagingChunks reduction_chunks(CallKind kind, size_t count, size_t esz, size_t out_bytes,
                                        int rank, int nranks, size_t slice_elems,
                                        size_t min_chunk) {
  backend::StagingChunks ch;
  const bool flat = kind == CallKind::kAllReduce || kind == CallKind::kReduceScatter;
  if (!flat || nranks < 1 || esz == 0) return ch;
  const size_t in_bytes = count * esz;
  ch.in_chunk = backend::staging_chunk_bytes(in_bytes, min_chunk);
  ch.out_chunk = backend::staging_chunk_bytes(out_bytes, min_chunk);
  const bool scatter = kind == CallKind::kReduceScatter;
  // The ring's cut (ring.h): step i works on chunk (rank - i) mod P (one earlier for the
  // reduce-scatter), each slice lane walking every step, so the input is read slice by slice
  // across the ring's chunks, from this rank's first one.
  const RingPlan plan = scatter ? RingPlan(count, nranks, slice_elems)
                                : RingPlan(count, nranks, slice_elems, kRingChunkAlign);
  const int first = scatter ? mod(rank - 1, nranks) : rank;
  if (ch.in_chunk < in_bytes) {
    ch.in_order = sorted_chunks(in_bytes, ch.in_chunk, esz, [&](size_t e) {
      const int c = ring_chunk_of(plan, nranks, e);
      return std::make_pair(e - plan.chunk_offset(c), mod(first - c, nranks));
    });
  }
  // An AllReduce's lane decodes its slice of every chunk at once: the result is final slice by
  // slice across the chunks. A ReduceScatter's result is this rank's chunk, in slice order.
  if (!scatter && ch.out_chunk < out_bytes) {
    ch.out_order = sorted_chunks(out_bytes, ch.out_chunk, esz, [&](size_t e) {
      const int c = ring_chunk_of(plan, nranks, e);
      return std::make_pair(e - plan.chunk_offset(c), c);
    });
  }
  return ch;
}

}  // namespace sketchccl::coll
