#include "src/coll/reduce_scatter.h"

namespace sketchccl::coll {
namespace {

bool bit(const uint64_t* bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

// Set bits among positions [a, b): whole words by popcount, the ends bit by bit.
size_t count_set(const uint64_t* bits, size_t a, size_t b) {
  size_t n = 0;
  for (; a < b && a % 64 != 0; ++a)
    n += bit(bits, a) ? 1 : 0;
  for (; a + 64 <= b; a += 64)
    n += static_cast<size_t>(__builtin_popcountll(bits[a / 64]));
  for (; a < b; ++a)
    n += bit(bits, a) ? 1 : 0;
  return n;
}

}  // namespace

RingLink scatter_link(const RingLink& link, uint8_t phase) {
  RingLink l = link;
  l.phase = phase;
  return l;
}

size_t scatter_chunk_first(size_t count, const RingLink& link) {
  return static_cast<size_t>(link.rank) * (count / static_cast<size_t>(link.nranks));
}

SparseScatterPlan sparse_scatter_plan(const uint64_t* union_bits, size_t count,
                                      const RingLink& link) {
  const auto p = static_cast<size_t>(link.nranks);
  const size_t recvcount = count / p;
  SparseScatterPlan plan;
  plan.chunk_count = recvcount;
  plan.bounds.assign(p + 1, 0);
  size_t set = 0;
  for (size_t c = 0; c < p; ++c) {
    plan.bounds[c] = set;
    set += count_set(union_bits, c * recvcount, (c + 1) * recvcount);
  }
  plan.bounds[p] = set;
  const size_t first = static_cast<size_t>(link.rank) * recvcount;
  plan.chunk_bits.assign((recvcount + 63) / 64, 0);
  for (size_t i = 0; i < recvcount; ++i) {
    if (bit(union_bits, first + i)) plan.chunk_bits[i / 64] |= uint64_t(1) << (i % 64);
  }
  return plan;
}

}  // namespace sketchccl::coll
