// CUDA build of the codecs: kernels that drive the SCCL_HD routines of kernels/codec_impl.h,
// the same source the CPU build runs (kernels/host/codec_host.cc).
#include "kernels/cuda/codec_cuda.h"

#include <cuda_runtime.h>

#include "kernels/codec_impl.h"
#include "kernels/codec_internal.h"
#include "kernels/cuda/launch_util.cuh"

namespace sketchccl::kernels::cuda {

using namespace detail;  // NOLINT: this file is the detail routines' driver

namespace {

constexpr int kPeelBatch = 16;
constexpr int kPeelMaxRounds = 4096;

// Device verdicts (workspace word 0).
enum DevErr : int {
  kDevOk = 0,
  kDevMagic = 1,
  kDevVersion = 2,
  kDevCodec = 3,
  kDevCount = 4,
  kDevParams = 5,
  kDevSalt = 6,
  kDevTables = 7
};

// Workspace carving: fixed fields first, then per-codec arrays.
struct Ws {
  int* err;
  unsigned long long* progress;  // s2: positions resolved in the current batch
  unsigned long long* stats;     // peeled, estimated, nonzeros
  uint8_t* rest;
};
constexpr size_t kWsHead = 256;
Ws carve(void* ws) {
  uint8_t* b = static_cast<uint8_t*>(ws);
  return Ws{reinterpret_cast<int*>(b), reinterpret_cast<unsigned long long*>(b + 8),
            reinterpret_cast<unsigned long long*>(b + 16), b + kWsHead};
}

struct CasqWs {
  float *sample, *work, *centers, *tmp;
  uint32_t *sizes, *cnt;
  double* sum;
};
CasqWs casq_ws(uint8_t* r, size_t n, uint32_t buckets) {
  CasqWs c;
  const size_t S = n < kCasqSample ? n : kCasqSample;
  c.sample = reinterpret_cast<float*>(r);
  r += al(S * 4);
  c.work = reinterpret_cast<float*>(r);
  r += al(2 * S * 4);
  c.centers = reinterpret_cast<float*>(r);
  r += al(16 * 4);
  c.sizes = reinterpret_cast<uint32_t*>(r);
  r += al(16 * 4);
  c.sum = reinterpret_cast<double*>(r);
  r += al(size_t(buckets) * 8);
  c.cnt = reinterpret_cast<uint32_t*>(r);
  r += al(size_t(buckets) * 4);
  c.tmp = reinterpret_cast<float*>(r);
  return c;
}
size_t casq_ws_bytes(size_t n, uint32_t buckets) {
  const size_t S = n < kCasqSample ? n : kCasqSample;
  return al(S * 4) + al(2 * S * 4) + 2 * al(64) + al(size_t(buckets) * 8) +
         al(size_t(buckets) * 4) + al(n * 4);
}

struct S2Ws {
  double* res;
  uint32_t* cnt;
  unsigned long long* xr;
  uint32_t* claim;  // per position: lowest counter id that can resolve it this round
  uint8_t* state;   // per position: 0 unresolved, 1 resolved this round, 2 resolved
  float* val;
};
S2Ws s2_ws(uint8_t* r, size_t n, size_t nc) {
  S2Ws s;
  s.res = reinterpret_cast<double*>(r);
  r += al(nc * 8);
  s.cnt = reinterpret_cast<uint32_t*>(r);
  r += al(nc * 4);
  s.xr = reinterpret_cast<unsigned long long*>(r);
  r += al(nc * 8);
  s.claim = reinterpret_cast<uint32_t*>(r);
  r += al(n * 4);
  s.state = r;
  r += al(n);
  s.val = reinterpret_cast<float*>(r);
  return s;
}
size_t s2_ws_bytes(size_t n, size_t nc) {
  return al(nc * 8) + al(nc * 4) + al(nc * 8) + al(n * 4) + al(n) + al(n * 4);
}

// ---- validation
// ----------------------------------------------------------------------------------
__global__ void k_validate(const uint8_t* pkt, PacketHeader e, bool check_salt, size_t sizes_off,
                           int* err) {
  PacketHeader h;
  memcpy(&h, pkt, sizeof(h));
  int v = kDevOk;
  if (h.magic != kMagic) {
    v = kDevMagic;
  } else if (h.version != kVersion) {
    v = kDevVersion;
  } else if (h.codec != e.codec) {
    v = kDevCodec;
  } else if (h.n != e.n) {
    v = kDevCount;
  } else if (h.bits != e.bits || h.rows != e.rows || h.p0 != e.p0 || h.p1 != e.p1) {
    v = kDevParams;
  } else if (check_salt && h.salt != e.salt) {
    v = kDevSalt;
  } else if (sizes_off) {
    uint64_t sum = 0;
    for (uint32_t c = 0; c < e.p1; ++c) {
      uint32_t s;
      memcpy(&s, pkt + sizes_off + 4 * c, 4);
      if (s == 0) v = kDevTables;
      sum += s;
    }
    if (sum != e.p0) v = kDevTables;
  }
  *err = v;
}

__global__ void k_write_header(uint8_t* pkt, PacketHeader h) {
  memcpy(pkt, &h, sizeof(h));
}

// ---- casts
// ---------------------------------------------------------------------------------------
template <int ET>
__global__ void k_cast(CodecId c, const uint8_t* in, const void* x, size_t n, uint8_t* out,
                       const int* err) {
  if (err && *err) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = load_elem<ET>(x, i);
    if (c == CodecId::kNone) {
      float* o = reinterpret_cast<float*>(out);
      o[i] = in ? reinterpret_cast<const float*>(in)[i] + v : v;
    } else if (c == CodecId::kBf16) {
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      o[i] =
          float_to_bf16((in ? bf16_to_float(reinterpret_cast<const uint16_t*>(in)[i]) : 0.0f) + v);
    } else {
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      o[i] =
          float_to_half((in ? half_to_float(reinterpret_cast<const uint16_t*>(in)[i]) : 0.0f) + v);
    }
  }
}

template <int ET>
__global__ void k_cast_decode(CodecId c, const uint8_t* in, size_t n, void* y, float scale,
                              const int* err, unsigned long long* nz) {
  if (*err) return;
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float v = c == CodecId::kNone   ? reinterpret_cast<const float*>(in)[i]
              : c == CodecId::kBf16 ? bf16_to_float(reinterpret_cast<const uint16_t*>(in)[i])
                                    : half_to_float(reinterpret_cast<const uint16_t*>(in)[i]);
    v *= scale;
    local += v != 0.0f;
    store_elem<ET>(y, i, v);
  }
  if (local) atomicAdd(nz, local);
}

// ---- q*: one thread per block of 256
// -------------------------------------------------------------
template <uint32_t BITS, int ET>
__global__ void k_quant(uint64_t key, const uint8_t* in, const void* x, size_t n, uint8_t* out,
                        const int* err) {
  if (err && *err) return;
  const size_t blk = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t base = blk * kBlock;
  if (base >= n) return;
  const size_t cnt = n - base < kBlock ? n - base : kBlock;
  const size_t R = q_record_bytes(BITS);
  q_step_block<BITS, ET>(in ? in + blk * R : nullptr, x, base, cnt, q_block_key(key, blk),
                         out + blk * R);
}

template <uint32_t BITS, int ET>
__global__ void k_quant_decode(const uint8_t* in, size_t n, void* y, float scale, const int* err,
                               unsigned long long* nz) {
  if (*err) return;
  const size_t blk = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t base = blk * kBlock;
  if (base >= n) return;
  const size_t cnt = n - base < kBlock ? n - base : kBlock;
  float v[kBlock];
  q_unpack_record<BITS>(in + blk * q_record_bytes(BITS), cnt, v);
  unsigned long long local = 0;
  for (size_t j = 0; j < cnt; ++j) {
    float o = v[j] * scale;
    local += o != 0.0f;
    store_elem<ET>(y, base + j, o);
  }
  if (local) atomicAdd(nz, local);
}

// ---- non-finite block mask
// -------------------------------------------------------------------------
template <int ET>
__global__ void k_mark_nonfinite(const void* x, size_t n, uint64_t* nf, const int* err) {
  if (err && *err) return;
  const size_t blk = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t base = blk * kBlock;
  if (base >= n) return;
  const size_t cnt = n - base < kBlock ? n - base : kBlock;
  bool fin = true;
  for (size_t j = 0; j < cnt; ++j)
    fin &= is_finite(load_elem<ET>(x, base + j));
  if (!fin) {
    atomicOr(reinterpret_cast<unsigned long long*>(nf) + (blk >> 6), 1ull << (blk & 63));
  }
}

// ---- CASQ
// ----------------------------------------------------------------------------------------
struct CasqDecodeView {
  const float* table;
  const uint64_t* nf;
  const uint8_t* codes;
  const uint8_t* sizes_bytes;
  uint32_t bits, clusters;
  const uint8_t* hdr;
};

__device__ float casq_value(const CasqDecodeView& v, size_t i) {
  if (bit_get(v.nf, i / kBlock)) return qnan();
  uint64_t salt;
  memcpy(&salt, v.hdr + 24, 8);
  uint32_t c = unpack_one(v.codes, v.bits, i);
  uint32_t off = 0, size = 0;
  for (uint32_t k = 0; k <= c; ++k) {
    memcpy(&size, v.sizes_bytes + 4 * k, 4);
    if (k < c) off += size;
  }
  return v.table[off + casq_bucket(salt, i, size)];
}

// tmp[i] = decoded incoming + x[i].
template <int ET>
__global__ void k_casq_sum(CasqDecodeView v, const void* x, size_t n, float* tmp, const int* err) {
  if (*err) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    tmp[i] = casq_value(v, i) + load_elem<ET>(x, i);
  }
}

template <int ET>
__global__ void k_casq_decode(CasqDecodeView v, size_t n, void* y, float scale, const int* err,
                              unsigned long long* nz) {
  if (*err) return;
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float o = casq_value(v, i) * scale;
    local += o != 0.0f;
    store_elem<ET>(y, i, o);
  }
  if (local) atomicAdd(nz, local);
}

template <int ET>
__global__ void k_casq_sample(const void* x, size_t n, const uint64_t* nf, uint64_t key, uint32_t S,
                              float* sample, const int* err) {
  if (err && *err) return;
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= S) return;
  size_t i = casq_sample_index(key, n, S, k);
  sample[k] = bit_get(nf, i / kBlock) ? 0.0f : load_elem<ET>(x, i);
}

__global__ void k_casq_fit(const float* sample, uint32_t S, uint32_t bits, uint32_t buckets,
                           uint64_t key, float* work, float* centers, uint32_t* sizes,
                           uint8_t* pkt_sizes, const int* err) {
  if (err && *err) return;
  casq_fit(sample, S, bits, buckets, key, work, centers, sizes);
  memcpy(pkt_sizes, sizes, 4u << bits);
}

// One thread per group of 8 elements: codes, and bucket sums for the means.
template <int ET>
__global__ void k_casq_codes(const void* x, size_t n, const uint64_t* nf, uint32_t bits,
                             uint64_t salt, const float* centers, const uint32_t* sizes,
                             uint8_t* codes, double* sum, uint32_t* cnt, const int* err) {
  if (err && *err) return;
  const size_t g = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (g * 8 >= n) return;
  const uint32_t K = 1u << bits;
  uint32_t off[16];
  for (uint32_t c = 0, o = 0; c < K; ++c) {
    off[c] = o;
    o += sizes[c];
  }
  float thr[16];
  casq_thresholds(centers, K, thr);
  uint32_t c8[8];
  for (size_t k = 0; k < 8; ++k) {
    size_t i = g * 8 + k;
    c8[k] = 0;
    if (i >= n || bit_get(nf, i / kBlock)) continue;
    float v = load_elem<ET>(x, i);
    uint32_t c = casq_code(thr, K, v);
    uint32_t b = off[c] + casq_bucket(salt, i, sizes[c]);
    atomicAdd(sum + b, double(v));
    atomicAdd(cnt + b, 1u);
    c8[k] = c;
  }
  pack8(c8, bits, codes + g * bits);
}

__global__ void k_casq_table(uint32_t K, uint32_t buckets, const float* centers,
                             const uint32_t* sizes, const double* sum, const uint32_t* cnt,
                             float* table, const int* err) {
  if (err && *err) return;
  const uint32_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= buckets) return;
  uint32_t c = 0, end = sizes[0];
  while (b >= end && c + 1 < K)
    end += sizes[++c];
  table[b] = cnt[b] ? float(sum[b] / cnt[b]) : centers[c];
}

// ---- s2
// ------------------------------------------------------------------------------------------
template <int ET>
__global__ void k_s2_accumulate(const void* x, size_t n, uint64_t salt, uint32_t rows,
                                uint32_t counters, uint64_t* bm, const uint64_t* nf, double* sk,
                                const int* err) {
  if (err && *err) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (bit_get(nf, i / kBlock)) continue;
    float v = load_elem<ET>(x, i);
    if (v == 0.0f) continue;
    atomicOr(reinterpret_cast<unsigned long long*>(bm) + (i >> 6), 1ull << (i & 63));
    for (uint32_t r = 0; r < rows; ++r) {
      bool neg;
      uint32_t b = s2_bucket(salt, r, i, counters, &neg);
      atomicAdd(sk + size_t(r) * counters + b, neg ? -double(v) : double(v));
    }
  }
}

// Counts and index XORs of the set positions per counter.
__global__ void k_s2_init(const uint64_t* bm, size_t n, uint64_t salt, uint32_t rows,
                          uint32_t counters, uint32_t* cnt, unsigned long long* xr, uint8_t* state,
                          unsigned long long* nonzeros, const int* err) {
  if (*err) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    state[i] = 2;  // not in the support: nothing to resolve
    if (!bit_get(bm, i)) continue;
    state[i] = 0;
    atomicAdd(nonzeros, 1ull);
    for (uint32_t r = 0; r < rows; ++r) {
      bool neg;
      size_t id = size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg);
      atomicAdd(cnt + id, 1u);
      atomicXor(xr + id, (unsigned long long)i);
    }
  }
}

// Round, part 1: each pure counter (one unresolved position) proposes itself for its position;
// the lowest counter id wins, so the result does not depend on thread timing.
__global__ void k_s2_claim(size_t nc, const uint32_t* cnt, const unsigned long long* xr,
                           uint32_t* claim) {
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    if (cnt[id] == 1) atomicMin(claim + xr[id], uint32_t(id));
  }
}

// Part 2: winners resolve their position from the (unchanged this round) residual.
__global__ void k_s2_resolve(size_t nc, uint64_t salt, uint32_t counters, const uint32_t* cnt,
                             const unsigned long long* xr, const double* res, uint32_t* claim,
                             uint8_t* state, float* val, unsigned long long* progress) {
  for (size_t id = blockIdx.x * size_t(blockDim.x) + threadIdx.x; id < nc;
       id += size_t(gridDim.x) * blockDim.x) {
    if (cnt[id] != 1) continue;
    size_t i = size_t(xr[id]);
    if (claim[i] != uint32_t(id)) continue;
    bool neg;
    s2_bucket(salt, uint32_t(id / counters), i, counters, &neg);
    val[i] = float(neg ? -res[id] : res[id]);
    state[i] = 1;
    claim[i] = 0xffffffffu;
    atomicAdd(progress, 1ull);
  }
}

// Part 3: positions resolved this round leave their counters.
__global__ void k_s2_subtract(size_t n, uint64_t salt, uint32_t rows, uint32_t counters,
                              uint8_t* state, const float* val, double* res, uint32_t* cnt,
                              unsigned long long* xr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (state[i] != 1) continue;
    state[i] = 3;  // resolved by peeling
    double v = val[i];
    for (uint32_t r = 0; r < rows; ++r) {
      bool neg;
      size_t id = size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg);
      atomicAdd(res + id, neg ? v : -v);
      atomicSub(cnt + id, 1u);
      atomicXor(xr + id, (unsigned long long)i);
    }
  }
}

// Leftovers get the median of their rows' residual estimates; then the output.
template <int ET>
__global__ void k_s2_output(size_t n, uint64_t salt, uint32_t rows, uint32_t counters,
                            const uint8_t* state, const float* val, const double* res,
                            const uint64_t* nf, void* y, float scale, unsigned long long* stats,
                            const int* err) {
  if (*err) return;
  unsigned long long peeled = 0, estimated = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float o = 0.0f;
    if (state[i] == 3) {
      o = val[i];
      peeled++;
    } else if (state[i] == 0) {
      double est[kMaxS2Rows];
      for (uint32_t r = 0; r < rows; ++r) {
        bool neg;
        double cv = res[size_t(r) * counters + s2_bucket(salt, r, i, counters, &neg)];
        double e = neg ? -cv : cv;
        uint32_t j = r;
        while (j > 0 && est[j - 1] > e) {
          est[j] = est[j - 1];
          --j;
        }
        est[j] = e;
      }
      o = float(rows & 1 ? est[rows / 2] : 0.5 * (est[rows / 2 - 1] + est[rows / 2]));
      estimated++;
    }
    o = bit_get(nf, i / kBlock) ? qnan() : o * scale;
    store_elem<ET>(y, i, o);
  }
  if (peeled) atomicAdd(stats + 0, peeled);
  if (estimated) atomicAdd(stats + 1, estimated);
}

__global__ void k_stats_out(const unsigned long long* stats, DecodeStats* out, const int* err) {
  if (*err) return;
  out->peeled = stats[0];
  out->estimated = stats[1];
  out->nonzeros = stats[2];
}

Status check_ws(const CodecParams& p, size_t n, void* ws, size_t ws_bytes) {
  size_t need = workspace_bytes(p, n);
  if (ws == nullptr || ws_bytes < need || (reinterpret_cast<uintptr_t>(ws) & (kWsAlign - 1))) {
    return errorf(Code::kInvalidArgument,
                  "codec %s: workspace of %zu bytes (need %zu, 256-byte aligned)",
                  codec_name(p.codec), ws_bytes, need);
  }
  return Status::Ok();
}

Status check_buf(const CodecParams& p, size_t n, const void* pkt, size_t bytes, const void* data,
                 const char* what) {
  if (pkt == nullptr || (reinterpret_cast<uintptr_t>(pkt) & 7u)) {
    return errorf(Code::kInvalidArgument, "codec %s: %s packet null or not 8-byte aligned",
                  codec_name(p.codec), what);
  }
  size_t need = bytes_unchecked(p, n);
  if (bytes < need) {
    return errorf(Code::kInvalidArgument, "codec %s: %s packet of %zu bytes, expected %zu",
                  codec_name(p.codec), what, bytes, need);
  }
  if (n > 0 && data == nullptr) {
    return errorf(Code::kInvalidArgument, "codec %s: null data", codec_name(p.codec));
  }
  return Status::Ok();
}

// Launches the validation of `in` into ws.err.
void validate(const CodecParams& p, size_t n, const void* in, const Ws& w, cudaStream_t s) {
  PacketHeader e = expected_header(p, n);
  size_t sizes_off = is_casq(p.codec) ? sizeof(PacketHeader) : 0;
  k_validate<<<1, 1, 0, s>>>(static_cast<const uint8_t*>(in), e, p.codec == CodecId::kS2, sizes_off,
                             w.err);
}

CasqDecodeView casq_view(const CodecParams& p, size_t n, const uint8_t* pkt) {
  CasqLayout L = casq_layout(codec_bits(p.codec), n, p.casq_buckets);
  return CasqDecodeView{reinterpret_cast<const float*>(pkt + L.table_off),
                        reinterpret_cast<const uint64_t*>(pkt + L.nf_off),
                        pkt + L.codes_off,
                        pkt + L.sizes_off,
                        L.bits,
                        L.clusters,
                        pkt};
}

// CASQ body from values x (type ET) whose non-finite blocks are already marked in out's mask.
template <int ET>
void casq_body(const CodecParams& p, const void* x, size_t n, uint8_t* out, const Ws& w,
               const int* err, cudaStream_t s) {
  const uint32_t bits = codec_bits(p.codec);
  const CasqLayout L = casq_layout(bits, n, p.casq_buckets);
  const uint64_t key = stream_key(p.seed, p.call, p.slice, p.step);
  const uint64_t salt = key ^ 0xca5ca5ull;
  CasqWs c = casq_ws(w.rest, n, L.buckets);
  const uint32_t S = uint32_t(n < kCasqSample ? n : kCasqSample);
  const uint64_t* nf = reinterpret_cast<const uint64_t*>(out + L.nf_off);
  cudaMemsetAsync(c.sum, 0, size_t(L.buckets) * 8, s);
  cudaMemsetAsync(c.cnt, 0, size_t(L.buckets) * 4, s);
  if (S > 0) k_casq_sample<ET><<<grid_for(S), kThreads, 0, s>>>(x, n, nf, key, S, c.sample, err);
  k_casq_fit<<<1, 1, 0, s>>>(c.sample, S, bits, L.buckets, key, c.work, c.centers, c.sizes,
                             out + L.sizes_off, err);
  if (n > 0) {
    k_casq_codes<ET><<<grid_for(div_up(n, 8)), kThreads, 0, s>>>(
        x, n, nf, bits, salt, c.centers, c.sizes, out + L.codes_off, c.sum, c.cnt, err);
  }
  k_casq_table<<<grid_for(L.buckets), kThreads, 0, s>>>(
      L.clusters, L.buckets, c.centers, c.sizes, c.sum, c.cnt,
      reinterpret_cast<float*>(out + L.table_off), err);
}

}  // namespace

size_t workspace_bytes(const CodecParams& p, size_t n) {
  size_t b = kWsHead;
  if (is_casq(p.codec)) {
    b += casq_ws_bytes(n, casq_layout(codec_bits(p.codec), n, p.casq_buckets).buckets);
  } else if (p.codec == CodecId::kS2) {
    b += s2_ws_bytes(n, size_t(p.s2_rows) * p.s2_counters);
  }
  return b;
}

Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt, size_t cap,
              void* ws, size_t ws_bytes, cudaStream_t s) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, pkt, cap, x, "output"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const size_t need = bytes_unchecked(p, n);
  uint8_t* out = static_cast<uint8_t*>(pkt);
  Ws w = carve(ws);
  cudaMemsetAsync(out, 0, need, s);
  cudaMemsetAsync(w.err, 0, sizeof(int), s);
  k_write_header<<<1, 1, 0, s>>>(out, expected_header(p, n));
  uint8_t* body = out + sizeof(PacketHeader);
  const uint64_t key = stream_key(p.seed, p.call, p.slice, p.step);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (n == 0 && !is_casq(p.codec)) return;
    if (is_quant(p.codec)) {
      unsigned g = grid_for(div_up(n, kBlock));
      if (p.codec == CodecId::kQ8)
        k_quant<8, ET><<<g, kThreads, 0, s>>>(key, nullptr, x, n, body, nullptr);
      if (p.codec == CodecId::kQ4)
        k_quant<4, ET><<<g, kThreads, 0, s>>>(key, nullptr, x, n, body, nullptr);
      if (p.codec == CodecId::kQ2)
        k_quant<2, ET><<<g, kThreads, 0, s>>>(key, nullptr, x, n, body, nullptr);
    } else if (is_casq(p.codec)) {
      CasqLayout L = casq_layout(codec_bits(p.codec), n, p.casq_buckets);
      uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
      if (n > 0)
        k_mark_nonfinite<ET><<<grid_for(div_up(n, kBlock)), kThreads, 0, s>>>(x, n, nf, nullptr);
      casq_body<ET>(p, x, n, out, w, nullptr, s);
    } else if (p.codec == CodecId::kS2) {
      S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
      uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
      k_mark_nonfinite<ET><<<grid_for(div_up(n, kBlock)), kThreads, 0, s>>>(x, n, nf, nullptr);
      k_s2_accumulate<ET><<<grid_for(n), kThreads, 0, s>>>(
          x, n, s2_salt(p.seed, p.call, p.slice), L.rows, L.counters,
          reinterpret_cast<uint64_t*>(out + L.bitmap_off), nf,
          reinterpret_cast<double*>(out + L.sketch_off), nullptr);
    } else {
      k_cast<ET><<<grid_for(n), kThreads, 0, s>>>(p.codec, nullptr, x, n, body, nullptr);
    }
  });
}

Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
            size_t n, void* outp, size_t cap, void* ws, size_t ws_bytes, cudaStream_t s) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, in, in_bytes, x, "input"));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, outp, cap, x, "output"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const size_t need = bytes_unchecked(p, n);
  const uint8_t* ib = static_cast<const uint8_t*>(in);
  uint8_t* out = static_cast<uint8_t*>(outp);
  Ws w = carve(ws);
  validate(p, n, in, w, s);
  const int* err = w.err;
  const uint64_t key = stream_key(p.seed, p.call, p.slice, p.step);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (is_casq(p.codec)) {
      // Not linear: decode + add into tmp, then refit and re-encode from tmp (in may be out).
      CasqLayout L = casq_layout(codec_bits(p.codec), n, p.casq_buckets);
      CasqWs c = casq_ws(w.rest, n, L.buckets);
      uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
      if (n > 0) {
        k_casq_sum<ET><<<grid_for(n), kThreads, 0, s>>>(casq_view(p, n, ib), x, n, c.tmp, err);
      }
      // The header check already ran; from here on `in` is no longer read.
      cudaMemsetAsync(out + sizeof(PacketHeader), 0, need - sizeof(PacketHeader), s);
      k_write_header<<<1, 1, 0, s>>>(out, expected_header(p, n));
      if (n > 0) {
        k_mark_nonfinite<0><<<grid_for(div_up(n, kBlock)), kThreads, 0, s>>>(c.tmp, n, nf, err);
      }
      casq_body<0>(p, c.tmp, n, out, w, err, s);
      return;
    }
    if (out != ib) cudaMemcpyAsync(out, ib, need, cudaMemcpyDeviceToDevice, s);
    uint8_t* body = out + sizeof(PacketHeader);
    if (n == 0) return;
    if (is_quant(p.codec)) {
      unsigned g = grid_for(div_up(n, kBlock));
      if (p.codec == CodecId::kQ8)
        k_quant<8, ET><<<g, kThreads, 0, s>>>(key, body, x, n, body, err);
      if (p.codec == CodecId::kQ4)
        k_quant<4, ET><<<g, kThreads, 0, s>>>(key, body, x, n, body, err);
      if (p.codec == CodecId::kQ2)
        k_quant<2, ET><<<g, kThreads, 0, s>>>(key, body, x, n, body, err);
    } else if (p.codec == CodecId::kS2) {
      S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
      uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
      k_mark_nonfinite<ET><<<grid_for(div_up(n, kBlock)), kThreads, 0, s>>>(x, n, nf, err);
      k_s2_accumulate<ET><<<grid_for(n), kThreads, 0, s>>>(
          x, n, s2_salt(p.seed, p.call, p.slice), L.rows, L.counters,
          reinterpret_cast<uint64_t*>(out + L.bitmap_off), nf,
          reinterpret_cast<double*>(out + L.sketch_off), err);
    } else {
      k_cast<ET><<<grid_for(n), kThreads, 0, s>>>(p.codec, body, x, n, body, err);
    }
  });
}

Status decode(const CodecParams& p, const void* pkt, size_t pkt_bytes, void* y, ElemType t,
              size_t n, float scale, DecodeStats* stats_dev, void* ws, size_t ws_bytes,
              cudaStream_t s) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, pkt, pkt_bytes, y, "input"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const uint8_t* ib = static_cast<const uint8_t*>(pkt);
  const uint8_t* body = ib + sizeof(PacketHeader);
  Ws w = carve(ws);
  cudaMemsetAsync(w.stats, 0, 3 * sizeof(unsigned long long), s);
  validate(p, n, pkt, w, s);
  const int* err = w.err;
  Status st = by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (n == 0) return;
    if (is_quant(p.codec)) {
      unsigned g = grid_for(div_up(n, kBlock));
      if (p.codec == CodecId::kQ8)
        k_quant_decode<8, ET><<<g, kThreads, 0, s>>>(body, n, y, scale, err, w.stats + 2);
      if (p.codec == CodecId::kQ4)
        k_quant_decode<4, ET><<<g, kThreads, 0, s>>>(body, n, y, scale, err, w.stats + 2);
      if (p.codec == CodecId::kQ2)
        k_quant_decode<2, ET><<<g, kThreads, 0, s>>>(body, n, y, scale, err, w.stats + 2);
    } else if (is_casq(p.codec)) {
      k_casq_decode<ET>
          <<<grid_for(n), kThreads, 0, s>>>(casq_view(p, n, ib), n, y, scale, err, w.stats + 2);
    } else if (p.codec == CodecId::kS2) {
      const S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
      const size_t nc = size_t(L.rows) * L.counters;
      const uint64_t salt = s2_salt(p.seed, p.call, p.slice);
      S2Ws v = s2_ws(w.rest, n, nc);
      const uint64_t* bm = reinterpret_cast<const uint64_t*>(ib + L.bitmap_off);
      cudaMemcpyAsync(v.res, ib + L.sketch_off, nc * 8, cudaMemcpyDeviceToDevice, s);
      cudaMemsetAsync(v.cnt, 0, nc * 4, s);
      cudaMemsetAsync(v.xr, 0, nc * 8, s);
      cudaMemsetAsync(v.claim, 0xff, n * 4, s);
      k_s2_init<<<grid_for(n), kThreads, 0, s>>>(bm, n, salt, L.rows, L.counters, v.cnt, v.xr,
                                                 v.state, w.stats + 2, err);
      // Peeling rounds; the device verdict is checked with the progress after each batch.
      for (int round = 0; round < kPeelMaxRounds; round += kPeelBatch) {
        cudaMemsetAsync(w.progress, 0, sizeof(unsigned long long), s);
        for (int k = 0; k < kPeelBatch; ++k) {
          k_s2_claim<<<grid_for(nc), kThreads, 0, s>>>(nc, v.cnt, v.xr, v.claim);
          k_s2_resolve<<<grid_for(nc), kThreads, 0, s>>>(nc, salt, L.counters, v.cnt, v.xr, v.res,
                                                         v.claim, v.state, v.val, w.progress);
          k_s2_subtract<<<grid_for(n), kThreads, 0, s>>>(n, salt, L.rows, L.counters, v.state,
                                                         v.val, v.res, v.cnt, v.xr);
        }
        unsigned long long progress = 0;
        int verdict = 0;
        cudaMemcpyAsync(&progress, w.progress, sizeof(progress), cudaMemcpyDeviceToHost, s);
        cudaMemcpyAsync(&verdict, w.err, sizeof(verdict), cudaMemcpyDeviceToHost, s);
        if (cudaStreamSynchronize(s) != cudaSuccess || progress == 0 || verdict != 0) break;
      }
      k_s2_output<ET><<<grid_for(n), kThreads, 0, s>>>(
          n, salt, L.rows, L.counters, v.state, v.val, v.res,
          reinterpret_cast<const uint64_t*>(ib + L.nf_off), y, scale, w.stats, err);
    } else {
      k_cast_decode<ET>
          <<<grid_for(n), kThreads, 0, s>>>(p.codec, body, n, y, scale, err, w.stats + 2);
    }
  });
  SCCL_RETURN_IF_ERROR(st);
  if (stats_dev) k_stats_out<<<1, 1, 0, s>>>(w.stats, stats_dev, err);
  return Status::Ok();
}

Status read_device_error(const void* ws, cudaStream_t s) {
  int v = 0;
  cudaError_t e = cudaMemcpyAsync(&v, ws, sizeof(v), cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    return errorf(Code::kUnhandledCudaError, "codec: reading the device verdict: %s",
                  cudaGetErrorString(e));
  }
  static const char* const kWhy[] = {"ok",    "bad magic",         "format version",
                                     "codec", "element count",     "parameters",
                                     "salt",  "CASQ bucket tables"};
  if (v != 0) {
    return errorf(Code::kInvalidArgument, "codec: malformed packet (%s)",
                  v > 0 && v < 8 ? kWhy[v] : "unknown");
  }
  return Status::Ok();
}

}  // namespace sketchccl::kernels::cuda
