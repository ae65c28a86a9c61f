// CPU driver of s2's decode: the routines of kernels/s2_peel.h in loops, one slot per support
// position. A round visits only the counters that became pure in the previous one (every
// counter pure at a round's start did), so the peel costs O(support * rows) after an
// O(n / 64 + counters) setup.
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
  d->pos.clear();
  s2_for_each_support(reinterpret_cast<const uint64_t*>(pkt + L.bitmap_off), n,
                      [&](size_t i) { d->pos.push_back(i); });
  const size_t m = d->pos.size();
  d->claim.assign(m, 0xffffffffu);
  d->state.resize(m);
  d->val.resize(m);
  // Each slot's counters, hashed once.
  const uint64_t salt = s2_salt(p.seed, p.call, p.offset_key);
  d->bk.resize(m * L.rows);
  for (size_t k = 0; k < m; ++k) {
    for (uint32_t r = 0; r < L.rows; ++r) {
      bool neg;
      const uint32_t b = s2_bucket(salt, r, d->pos[k], L.counters, &neg);
      d->bk[k * L.rows + r] = b | (neg ? 0x80000000u : 0u);
    }
  }
  S2Peel& s = d->s;
  s = S2Peel{reinterpret_cast<const uint64_t*>(pkt + L.bitmap_off),
             d->pos.data(),
             d->bk.data(),
             d->res.data(),
             d->cnt.data(),
             d->xr.data(),
             d->claim.data(),
             d->state.data(),
             d->val.data(),
             salt,
             L.rows,
             L.counters,
             s2_unit(emax)};
  const S2HostOps ops;
  for (size_t k = 0; k < m; ++k)
    s2_init_position(ops, s, k);
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
      const size_t k = size_t(s.xr[id]);  // meaningful only when id resolves
      if (!s2_resolve(ops, s, id)) continue;
      peeled++;
      for (uint32_t r = 0; r < s.rows; ++r) {
        bool neg;
        const size_t id2 = s2_counter(s, r, k, 0, &neg);
        if (s.cnt[id2] == 1) d->next.push_back(id2);
      }
    }
    d->pure.swap(d->next);
  }
  st->nonzeros = m;
  st->peeled = peeled;
  st->estimated = m - peeled;
}

void s2_unresolved_bits(const S2HostDecode& d, const uint64_t* nf, size_t n, uint64_t* out) {
  std::fill(out, out + bitmap_words(n), uint64_t(0));
  for (size_t k = 0; k < d.pos.size(); ++k) {
    if (s2_unresolved(d.s, nf, k)) out[d.pos[k] >> 6] |= uint64_t(1) << (d.pos[k] & 63);
  }
}

}  // namespace sketchccl::kernels::detail
