// The compressed ReduceScatter (docs/reduce_scatter.md): the reduce-scatter half of the ring
// (ring_reduce_scatter), run by AllReduceEngine when AllReduceArgs::scatter is set. NCCL's layout:
// rank r receives elements [r·recvcount, (r+1)·recvcount) of the reduced input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/ring.h"
#include "src/coll/ring_phase.h"

namespace sketchccl::coll {

RingLink scatter_link(const RingLink& link, uint8_t phase);

// The first input element of this rank's chunk (count = P · recvcount).
size_t scatter_chunk_first(size_t count, const RingLink& link);

// Sparse phase 2 of a ReduceScatter: where each rank's chunk starts among the union values, and
// this rank's chunk of the union bitmap on its own (bit 0 = the chunk's first element).
struct SparseScatterPlan {
  std::vector<size_t> bounds;  // P + 1 offsets into the union values
  std::vector<uint64_t> chunk_bits;
  size_t chunk_count = 0;  // recvcount
};
SparseScatterPlan sparse_scatter_plan(const uint64_t* union_bits, size_t count,
                                      const RingLink& link);

}  // namespace sketchccl::coll
