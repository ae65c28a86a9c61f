// The CPU build's driver of s2's decode (kernels/s2_peel.h): rounds of peeling over a frontier
// of the counters that became pure, then every position's value.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <vector>

#include "kernels/codec.h"
#include "kernels/s2_peel.h"

namespace sketchccl::kernels::detail {

// f(i) for every position i < n whose bit is set, in increasing order.
template <typename F>
void s2_for_each_support(const uint64_t* bitmap, size_t n, F&& f) {
  const size_t words = bitmap_words(n);
  for (size_t w = 0; w < words; ++w) {
    uint64_t bits = bitmap[w];
    if (w == words - 1 && (n & 63)) bits &= (1ull << (n & 63)) - 1;
    while (bits) {
      f(w * 64 + size_t(__builtin_ctzll(bits)));
      bits &= bits - 1;
    }
  }
}

// The decode's arrays, kept between calls by the caller (one per thread).
struct S2HostDecode {
  std::vector<S2Fix> res, val;
  std::vector<uint32_t> cnt, claim, bk;
  std::vector<uint64_t> xr, pos;  // pos: the support, one slot each
  std::vector<uint8_t> state;
  std::vector<size_t> pure, next;
  S2Peel s;
};

// Peels the s2 packet `pkt` (validated) of n elements into d->s, one slot per support position
// (d->pos); s2_output(d->s, nf, k, scale) then gives slot k's element, position d->pos[k].
// order_seed 0 visits a round's counters in id order; another value shuffles them with that seed
// (tests: the result must not change).
void s2_peel_host(const CodecParams& p, const uint8_t* pkt, size_t n, uint64_t order_seed,
                  S2HostDecode* d, DecodeStats* st);

// out[bitmap_words(n)] = the positions of d's last peel left to the median estimate (outside
// non-finite blocks, nf: the packet's block mask).
void s2_unresolved_bits(const S2HostDecode& d, const uint64_t* nf, size_t n, uint64_t* out);

}  // namespace sketchccl::kernels::detail
