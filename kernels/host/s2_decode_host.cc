// CPU driver of s2's decode: the routines of kernels/s2_peel.h in loops. A round visits only the
// counters that became pure in the previous one (every counter pure at a round's start did), so
// the whole peel costs O(support * rows) after the O(n + counters) setup.
#include "kernels/s2_decode_host.h"

#include <algorithm>
#include <random>

namespace sketchccl::kernels::detail {

void s2_peel_host(const CodecParams& p, const uint8_t* pkt, size_t n, uint64_t order_seed,
                  S2HostDecode* d, DecodeStats* st) {
  const S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
  const size_t nc = size_t(L.rows) * L.counters;
  const double* sk = reinterpret_cast<const double*>(pkt + L.sketch_off);
  int emax = 0;
  for (size_t id = 0; id < nc; ++id)
    emax = std::max(emax, s2_exponent(sk[id]));
  d->res.resize(nc);
  for (size_t id = 0; id < nc; ++id)
    d->res[id] = s2_to_fix(sk[id], emax);
  d->cnt.assign(nc, 0);
  d->xr.assign(nc, 0);
  d->claim.assign(n, 0xffffffffu);
  d->state.resize(n);
  d->val.resize(n);
  S2Peel& s = d->s;
  s = S2Peel{reinterpret_cast<const uint64_t*>(pkt + L.bitmap_off),
             d->res.data(),
             d->cnt.data(),
             d->xr.data(),
             d->claim.data(),
             d->state.data(),
             d->val.data(),
             s2_salt(p.seed, p.call, p.offset_key),
             L.rows,
             L.counters,
             emax};
  const S2HostOps ops;
  uint64_t nonzeros = 0;
  for (size_t i = 0; i < n; ++i)
    nonzeros += s2_init_position(ops, s, i) ? 1u : 0u;
  d->pure.clear();
  for (size_t id = 0; id < nc; ++id) {
    if (s.cnt[id] == 1) d->pure.push_back(id);
  }
  std::mt19937_64 rng(order_seed);
  uint64_t peeled = 0;
  for (int round = 0; round < kS2PeelRounds; ++round) {
    // Counters pushed last round may have lost their position since.
    d->pure.erase(
        std::remove_if(d->pure.begin(), d->pure.end(), [&](size_t id) { return s.cnt[id] != 1; }),
        d->pure.end());
    if (d->pure.empty()) break;
    if (order_seed != 0) std::shuffle(d->pure.begin(), d->pure.end(), rng);
    for (size_t id : d->pure)
      s2_claim(ops, s, id);
    if (order_seed != 0) std::shuffle(d->pure.begin(), d->pure.end(), rng);
    d->next.clear();
    for (size_t id : d->pure) {
      const size_t i = size_t(s.xr[id]);  // meaningful only when id resolves
      if (!s2_resolve(ops, s, id)) continue;
      peeled++;
      for (uint32_t r = 0; r < s.rows; ++r) {
        bool neg;
        const size_t id2 = size_t(r) * s.counters + s2_bucket(s.salt, r, i, s.counters, &neg);
        if (s.cnt[id2] == 1) d->next.push_back(id2);
      }
    }
    d->pure.swap(d->next);
  }
  st->nonzeros = nonzeros;
  st->peeled = peeled;
  st->estimated = nonzeros - peeled;
}

}  // namespace sketchccl::kernels::detail
