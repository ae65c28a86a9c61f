// The CPU build's driver of s2's decode (kernels/s2_peel.h): rounds of peeling over a frontier
// of the counters that became pure, then every position's value.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "kernels/codec.h"
#include "kernels/s2_peel.h"

namespace sketchccl::kernels::detail {

// The decode's arrays, kept between calls by the caller (one per thread).
struct S2HostDecode {
  std::vector<S2Fix> res, val;
  std::vector<uint32_t> cnt, claim;
  std::vector<uint64_t> xr;
  std::vector<uint8_t> state;
  std::vector<size_t> pure, next;
  S2Peel s;
};

// Peels the s2 packet `pkt` (validated) of n elements into d->s; s2_output then gives each
// position. order_seed 0 visits a round's counters in id order; another value shuffles them
// with that seed (tests: the result must not change).
void s2_peel_host(const CodecParams& p, const uint8_t* pkt, size_t n, uint64_t order_seed,
                  S2HostDecode* d, DecodeStats* st);

}  // namespace sketchccl::kernels::detail
