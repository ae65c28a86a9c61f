// The soak's shared plan (tests/soak/soak.sh): what every rank of a run computes alike from the
// run's seed -- the sequence of calls, their sizes, types and ops -- and each rank's input values,
// so that every rank can check a result against the exact reference on its own.
#pragma once

#include <nccl.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sketchccl::soak {

// splitmix64: the seeded generator of the plan (same on every rank).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }

 private:
  uint64_t s_;
};

inline uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xd6e8feb86659fd93ull));
  return r.next();
}

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kGroup, kSplit };

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "allreduce";
    case Kind::kReduceScatter:
      return "reducescatter";
    case Kind::kAllGather:
      return "allgather";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kReduce:
      return "reduce";
    case Kind::kGroup:
      return "group";
    case Kind::kSplit:
      return "split";
  }
  return "?";
}

inline size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}
inline bool is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}
inline bool is_unsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

// One collective of the plan.
struct Call {
  Kind kind = Kind::kAllReduce;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  size_t count = 0;  // elements per rank (AllReduce, Broadcast, Reduce), per chunk otherwise
  bool in_place = false;
  int root = 0;
  double density = 1;  // fraction of non-zero inputs
  uint64_t data = 0;   // the seed of the inputs
  int group_size = 0;  // kGroup: that many AllReduces between ncclGroupStart/End
  int split_mode = 0;  // kSplit: how colors are chosen
  bool split_nocolor = false;
};

// The next call of a run of `nranks` ranks: mostly float AllReduces, sizes log-uniform up to
// 8 MiB; the other collectives, types and ops that NCCL has, some of which standalone may refuse.
inline Call next_call(Rng& rng, int nranks) {
  Call c;
  const uint64_t k = rng.below(100);
  c.kind = k < 60   ? Kind::kAllReduce
           : k < 72 ? Kind::kReduceScatter
           : k < 78 ? Kind::kAllGather
           : k < 84 ? Kind::kBroadcast
           : k < 88 ? Kind::kReduce
           : k < 96 ? Kind::kGroup
                    : Kind::kSplit;
  static const ncclDataType_t kOther[] = {ncclInt8,  ncclUint8,  ncclInt32,  ncclUint32,
                                          ncclInt64, ncclUint64, ncclFloat64};
  const uint64_t t = rng.below(100);
  c.type = t < 50   ? ncclFloat32
           : t < 65 ? ncclFloat16
           : t < 80 ? ncclBfloat16
                    : kOther[rng.below(7)];
  const uint64_t o = rng.below(100);
  c.op = o < 60 ? ncclSum : o < 75 ? ncclAvg : o < 85 ? ncclMax : o < 93 ? ncclMin : ncclProd;
  size_t bytes = 0;
  if (!rng.chance(0.05))
    bytes = static_cast<size_t>(std::exp(rng.unit() * std::log(8.0 * 1048576)));
  c.count = bytes / type_bytes(c.type);
  if (c.kind == Kind::kReduceScatter || c.kind == Kind::kAllGather) {
    c.count /= static_cast<size_t>(nranks);
  }
  c.in_place = rng.chance(0.5);
  c.root = static_cast<int>(rng.below(static_cast<uint64_t>(nranks)));
  const uint64_t d = rng.below(3);
  c.density = d == 0 ? 1.0 : d == 1 ? 0.1 : 0.001;
  c.data = rng.next();
  c.group_size = 2 + static_cast<int>(rng.below(3));
  c.split_mode = static_cast<int>(rng.below(3));
  c.split_nocolor = rng.chance(0.2);
  return c;
}

// Rank r's input element i of a call: a small integer, zero outside the density, so that every
// sum, product, maximum and minimum is exact in every type (fp16, bf16 included).
inline double input(const Call& c, ncclDataType_t t, ncclRedOp_t op, int r, size_t i) {
  uint64_t h = mix(c.data ^ (static_cast<uint64_t>(r) << 48), i);
  if (static_cast<double>(h >> 11) * 0x1.0p-53 >= c.density) return op == ncclProd ? 1 : 0;
  h >>= 8;
  if (op == ncclProd) {
    static const double kProd[] = {-2, -1, 1, 2};
    const double v = kProd[h % 4];
    return is_unsigned(t) ? std::fabs(v) : v;
  }
  const double v = static_cast<double>(h % 17) - 8;
  return is_unsigned(t) ? std::fabs(v) : v;
}

// The colors and keys of a split, as every rank computes them.
inline int split_color(const Call& c, int rank, int nranks) {
  if (c.split_nocolor && rank == nranks - 1) return NCCL_SPLIT_NOCOLOR;
  if (c.split_mode == 0) return rank % 2;
  if (c.split_mode == 1) return rank < nranks / 2 ? 0 : 1;
  return 7;
}
inline int split_key(const Call& c, int rank) {
  return c.split_mode == 1 ? -rank : rank;
}

}  // namespace sketchccl::soak
