// Phase 1 of `sparse` (docs/codecs.md "sparse"): the ranks agree on the union of their supports
// as an element bitmap, travelling as one of three encodings, the same on every rank:
//   element bitmap: 1 bit per element, OR-allreduced (the ring's elements are 64-bit words);
//   row bitmap:     1 bit per 64-element row, OR-allreduced; every element of a non-empty row is
//                   then in the union (phase 2 carries the zeros of those rows too);
//   index list:     sorted u32 indices per slice, merged as a union along the ring, in packets of
//                   a capacity agreed from the previous call's support; a slice whose union
//                   outgrows it is flagged, every rank sees the flag in the same final packet, and
//                   the call agrees on the element bitmap instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/coll/codec_choice.h"
#include "src/coll/ring.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// ---- the encodings' arithmetic (host memory, unit-tested) ---------------------------------
// Words of the row bitmap of a `count`-element buffer.
size_t row_bitmap_words(size_t count);
// rows: bit r set iff word r of the element bitmap `bits` (count elements) is non-zero.
void rows_of_bitmap(const uint64_t* bits, size_t count, uint64_t* rows);
// bits: all elements of every set row (below count), zero elsewhere.
void bitmap_of_rows(const uint64_t* rows, size_t count, uint64_t* bits);

// Index list capacity of a slice of n elements: twice its even share of the previous union
// support plus 64, at most n.
size_t index_list_capacity(uint64_t prev_nonzeros, size_t count, size_t n);
// Bytes of an index list packet of `capacity` entries: [u32 length][u32 overflowed][u32 x cap],
// rounded up to 8.
size_t index_list_packet_bytes(size_t capacity);
// The set bits of `bits` in [offset, offset + n), ascending, appended to `out`.
void indices_in(const uint64_t* bits, size_t offset, size_t n, std::vector<uint32_t>* out);
// out = the sorted union of two ascending lists.
void merge_indices(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b,
                   std::vector<uint32_t>* out);

// How phase 1 of a call went.
struct SupportOutcome {
  SupportEncoding used = SupportEncoding::kElementBitmap;  // what finally agreed the union
  bool index_overflow = false;  // an index list outgrew its capacity: element bitmap after it
  uint64_t rows = 0;            // non-empty 64-element rows of the union support
  uint64_t bytes_sent = 0;      // phase 1's bytes
  uint64_t bytes_received = 0;
};

struct SupportArgs {
  const void* x = nullptr;  // this rank's input (backend `be`'s memory)
  kernels::ElemType type = kernels::ElemType::kF32;
  size_t count = 0;
  SupportEncoding encoding = SupportEncoding::kElementBitmap;
  uint64_t prev_nonzeros = 0;  // the previous union support: the index list's capacity
  size_t slice_elems = 262144;
  int depth = 4;
};

// The union support of every rank's `x` into union_bits (bitmap_bytes(count) / 8 words, zeroed
// by the caller), identical on every rank. The bitmaps travel under link.phase; an index list
// under kPhaseSparseIndices.
Status agree_union_support(const CommLink& link, backend::Backend& be, const SupportArgs& a,
                           uint64_t* union_bits, SupportOutcome* out);

}  // namespace sketchccl::coll
