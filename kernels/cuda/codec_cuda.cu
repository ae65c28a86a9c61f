// CUDA build of the codecs: the launch wrappers of kernels/cuda/codec_cuda.h. The kernels
// (linear_kernels.cuh, casq_kernels.cuh, s2_kernels.cuh) drive the same SCCL_HD routines as
// the CPU build (kernels/host/codec_host.cc): group_io.h, q_block.h, casq_fit.h, codec_impl.h.
#include "kernels/cuda/codec_cuda.h"

#include <cuda_runtime.h>

#include "kernels/codec_internal.h"
#include "kernels/cuda/casq_kernels.cuh"
#include "kernels/cuda/launch_util.cuh"
#include "kernels/cuda/linear_kernels.cuh"
#include "kernels/cuda/s2_kernels.cuh"

namespace sketchccl::kernels::cuda {

using namespace detail;  // NOLINT: this file is the detail routines' driver

namespace {

constexpr unsigned kWarpsPerBlock = kThreads / kWarp;

// Workspace carving: fixed fields first, then per-codec arrays.
struct Ws {
  int* err;                   // the call's device verdict (PacketVerdict)
  int* emax;                  // s2: its fixed point's scale (largest exponent)
  unsigned long long* stats;  // peeled, estimated, nonzeros
  uint8_t* rest;
};
constexpr size_t kWsHead = 256;
Ws carve(void* ws) {
  uint8_t* b = static_cast<uint8_t*>(ws);
  return Ws{reinterpret_cast<int*>(b), reinterpret_cast<int*>(b + 8),
            reinterpret_cast<unsigned long long*>(b + 16), b + kWsHead};
}

struct CasqWs {
  CasqFitScratch* fit;
  float* tmp;    // step: decoded incoming + x
  uint8_t* nfb;  // one byte per 256-block: holds a non-finite value
  float* scl;    // per sub-block of kCasqSub (kCasqSubs per 256-block): its scale
};
CasqWs casq_ws(uint8_t* r, size_t n) {
  CasqWs c;
  c.fit = reinterpret_cast<CasqFitScratch*>(r);
  r += al(sizeof(CasqFitScratch));
  c.tmp = reinterpret_cast<float*>(r);
  r += al(n * 4);
  c.nfb = r;
  r += al(div_up(n, kBlock));
  c.scl = reinterpret_cast<float*>(r);
  return c;
}
size_t casq_ws_bytes(size_t n) {
  return al(sizeof(CasqFitScratch)) + al(n * 4) + al(div_up(n, kBlock)) +
         al(div_up(n, kBlock) * kCasqSubs * 4);
}

struct S2Ws {
  S2Fix* res;                // per counter
  uint32_t* cnt;             // per counter
  uint64_t* xr;              // per counter
  uint32_t* claim;           // per position
  uint8_t* state;            // per position
  S2Fix* val;                // per position
  unsigned long long* pure;  // per round: pure counters at its start
};
S2Ws s2_ws(uint8_t* r, size_t n, size_t nc) {
  S2Ws s;
  s.res = reinterpret_cast<S2Fix*>(r);
  r += al(nc * sizeof(S2Fix));
  s.cnt = reinterpret_cast<uint32_t*>(r);
  r += al(nc * 4);
  s.xr = reinterpret_cast<uint64_t*>(r);
  r += al(nc * 8);
  s.claim = reinterpret_cast<uint32_t*>(r);
  r += al(n * 4);
  s.state = r;
  r += al(n);
  s.val = reinterpret_cast<S2Fix*>(r);
  r += al(n * sizeof(S2Fix));
  s.pure = reinterpret_cast<unsigned long long*>(r);
  return s;
}
size_t s2_ws_bytes(size_t n, size_t nc) {
  return al(nc * sizeof(S2Fix)) + al(nc * 4) + al(nc * 8) + al(n * 4) + al(n) +
         al(n * sizeof(S2Fix)) + al(kS2PeelRounds * 8);
}

// The peeling rounds' grids: enough threads for the device, and cheap to launch for the rounds
// after the last (they return at once).
constexpr unsigned kS2RoundBlocks = 1024;

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

// Launches of the linear codecs' one kernel: encode (in null) or step (in == out). The
// quantizer of the codec's bits, or the cast to its wire type (kernels/codecs.def).
// The keys of (p), from p.call or from *call_dev on the device (QKeys).
QKeys keys_of(const CodecParams& p, const uint64_t* call_dev) {
  QKeys k;
  k.key = stream_key(p.seed, p.call, p.offset_key, p.step);
  k.rkey = rot_key(p.seed, p.call, p.offset_key);
  k.call = call_dev;
  k.seed = p.seed;
  k.offset_key = p.offset_key;
  k.step = p.step;
  return k;
}

// A call number read on the device reaches the linear codecs' kernels only.
Status check_call_dev(const CodecParams& p, const uint64_t* call_dev) {
  if (call_dev != nullptr && codec_family(p.codec) != CodecFamily::kLinear) {
    return errorf(Code::kInvalidArgument,
                  "codec %s: a call number read on the device (linear codecs only)",
                  codec_name(p.codec));
  }
  return Status::Ok();
}

template <int ET>
void launch_linear(const CodecParams& p, const PacketHeader& e, const uint8_t* in, const void* x,
                   size_t n, uint8_t* out, int* err, cudaStream_t s, const uint64_t* call_dev) {
  with_codec(p.codec, [&](auto codec) {
    constexpr CodecInfo c = decltype(codec)::info;
    if constexpr (c.family == CodecFamily::kLinear && c.bits > 0) {
      const unsigned g = blocks_for(div_up(n, kBlock), kWarpsPerBlock);
      SCCL_LAUNCH(g, kThreads, 0, s, k_quant<c.bits, ET, c.rotated>)
      (keys_of(p, call_dev), in, e, x, n, out, err);
    } else if constexpr (c.family == CodecFamily::kLinear) {
      const unsigned g = blocks_for(div_up(n, kGroup), kThreads);
      SCCL_LAUNCH(g, kThreads, 0, s, k_cast<int(c.wire), ET>)(in, e, x, n, out, err);
    }
  });
}

// CASQ's encode (in null) or step (in may be out): pass 1, fit, codes.
template <int ET>
void launch_casq(const CodecParams& p, const PacketHeader& e, const uint8_t* in, const void* x,
                 size_t n, uint8_t* out, const Ws& w, cudaStream_t s) {
  const CasqLayout L = casq_layout(codec_bits(p.codec), n);
  const uint64_t key = stream_key(p.seed, p.call, p.offset_key, p.step);
  const CasqWs c = casq_ws(w.rest, n);
  const unsigned g_blocks = blocks_for(div_up(n, kBlock), kWarpsPerBlock);
  with_codec(p.codec, [&](auto codec) {
    constexpr uint32_t BITS = decltype(codec)::info.bits;
    if constexpr (decltype(codec)::info.family == CodecFamily::kCasq) {
      // The values the packet encodes: x itself (encode) or the fp32 sum (step).
      const void* v = x;
      const int* err = nullptr;
      if (in != nullptr) {
        SCCL_LAUNCH(g_blocks, kThreads, 0, s, k_casq_combine<BITS, ET>)
        (in, e, L, x, n, c.tmp, c.nfb, c.scl, w.err);
        v = c.tmp;
        err = w.err;
      } else if (n > 0) {
        SCCL_LAUNCH(g_blocks, kThreads, 0, s, k_casq_mark<ET>)(x, n, c.nfb, c.scl);
      }
      auto rest = [&](auto vt) {
        constexpr int VT = decltype(vt)::value;
        SCCL_LAUNCH(1, kCasqLanes, 0, s, k_casq_fit<VT>)
        (v, n, c.nfb, c.scl, key, e, L, in, c.fit, out, err);
        if (n > 0) {
          SCCL_LAUNCH(blocks_for(div_up(n, kGroup), kThreads), kThreads, 0, s,
                      k_casq_codes<BITS, VT>)
          (v, n, c.nfb, c.scl, key, p.casq_nearest, c.fit, out + L.codes_off, err);
        }
      };
      if (in != nullptr) {
        rest(std::integral_constant<int, int(ElemType::kF32)>());
      } else {
        rest(std::integral_constant<int, ET>());
      }
    }
  });
}

}  // namespace

size_t workspace_bytes(const CodecParams& p, size_t n) {
  size_t b = kWsHead;
  if (codec_family(p.codec) == CodecFamily::kCasq) {
    b += casq_ws_bytes(n);
  } else if (codec_family(p.codec) == CodecFamily::kS2) {
    b += s2_ws_bytes(n, size_t(p.s2_rows) * p.s2_counters);
  }
  return b;
}

Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt, size_t cap,
              void* ws, size_t ws_bytes, cudaStream_t s, const uint64_t* call_dev) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_call_dev(p, call_dev));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, pkt, cap, x, "output"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const size_t need = bytes_unchecked(p, n);
  uint8_t* out = static_cast<uint8_t*>(pkt);
  const Ws w = carve(ws);
  const PacketHeader e = expected_header(p, n);
  cudaMemsetAsync(w.err, 0, sizeof(int), s);  // read_device_error after an encode: no verdict
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (codec_family(p.codec) == CodecFamily::kCasq) {
      launch_casq<ET>(p, e, nullptr, x, n, out, w, s);  // writes every byte of the packet
      return;
    }
    // Round-up padding (casts), and the sums s2 accumulates into, start from zero.
    cudaMemsetAsync(out, 0, need, s);
    if (codec_family(p.codec) == CodecFamily::kS2) {
      SCCL_LAUNCH(blocks_for(div_up(n, kBlock), 1), kBlock, 0, s, k_s2_accumulate<ET>)
      (nullptr, e, x, n, out, w.err);
    } else {
      launch_linear<ET>(p, e, nullptr, x, n, out, w.err, s, call_dev);
    }
  });
}

Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
            size_t n, void* outp, size_t cap, void* ws, size_t ws_bytes, cudaStream_t s,
            const uint64_t* call_dev) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_call_dev(p, call_dev));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, in, in_bytes, x, "input"));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, outp, cap, x, "output"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const size_t need = bytes_unchecked(p, n);
  const uint8_t* ib = static_cast<const uint8_t*>(in);
  uint8_t* out = static_cast<uint8_t*>(outp);
  if (out != ib && out < ib + need && ib < out + need) {
    return errorf(Code::kInvalidArgument, "codec %s: input and output packets overlap partially",
                  codec_name(p.codec));
  }
  const Ws w = carve(ws);
  const PacketHeader e = expected_header(p, n);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (codec_family(p.codec) == CodecFamily::kCasq) {
      launch_casq<ET>(p, e, ib, x, n, out, w, s);
      return;
    }
    // The linear codecs rewrite the packet in place: one kernel that also validates it.
    if (out != ib) cudaMemcpyAsync(out, ib, need, cudaMemcpyDeviceToDevice, s);
    if (codec_family(p.codec) == CodecFamily::kS2) {
      SCCL_LAUNCH(blocks_for(div_up(n, kBlock), 1), kBlock, 0, s, k_s2_accumulate<ET>)
      (out, e, x, n, out, w.err);
    } else {
      launch_linear<ET>(p, e, out, x, n, out, w.err, s, call_dev);
    }
  });
}

Status decode(const CodecParams& p, const void* pkt, size_t pkt_bytes, void* y, ElemType t,
              size_t n, float scale, DecodeStats* stats_dev, void* ws, size_t ws_bytes,
              cudaStream_t s, uint64_t* unresolved_dev, const uint64_t* call_dev) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  SCCL_RETURN_IF_ERROR(check_call_dev(p, call_dev));
  SCCL_RETURN_IF_ERROR(check_buf(p, n, pkt, pkt_bytes, y, "input"));
  SCCL_RETURN_IF_ERROR(check_ws(p, n, ws, ws_bytes));
  const uint8_t* ib = static_cast<const uint8_t*>(pkt);
  const Ws w = carve(ws);
  const PacketHeader e = expected_header(p, n);
  cudaMemsetAsync(w.stats, 0, 3 * sizeof(unsigned long long), s);
  const int* err = w.err;
  Status st = by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    unsigned long long* nz = w.stats + 2;
    const CodecFamily family = codec_family(p.codec);
    if (family != CodecFamily::kS2) {
      // The quantizer of the codec's bits, CASQ of its bits, or the cast to its wire type.
      with_codec(p.codec, [&](auto codec) {
        constexpr CodecInfo c = decltype(codec)::info;
        if constexpr (c.family == CodecFamily::kLinear && c.bits > 0) {
          const unsigned g = blocks_for(div_up(n, kBlock), kWarpsPerBlock);
          SCCL_LAUNCH(g, kThreads, 0, s, k_quant_decode<c.bits, ET, c.rotated>)
          (keys_of(p, call_dev), ib, e, n, y, scale, w.err, nz);
        } else if constexpr (c.family == CodecFamily::kLinear) {
          const unsigned g = blocks_for(div_up(n, kGroup), kThreads);
          SCCL_LAUNCH(g, kThreads, 0, s, k_cast_decode<int(c.wire), ET>)
          (ib, e, n, y, scale, w.err, nz);
        } else if constexpr (c.family == CodecFamily::kCasq) {
          const CasqLayout L = casq_layout(c.bits, n);
          const unsigned g = blocks_for(div_up(n, kGroup), kThreads);
          SCCL_LAUNCH(g, kThreads, 0, s, k_casq_decode<c.bits, ET>)
          (ib, e, L, n, y, scale, w.err, nz);
        }
      });
    } else {
      // Everything is enqueued: no host synchronisation, so the proxy never waits for the device
      // inside a decode (it polls the ticket between transfers). kS2PeelRounds
      // rounds of two kernels; those after the last round with a pure counter return at once.
      SCCL_LAUNCH(1, 1, 0, s, k_validate)(ib, e, w.err);
      const S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
      const size_t nc = size_t(L.rows) * L.counters;
      S2Ws v = s2_ws(w.rest, n, nc);
      const double* sk = reinterpret_cast<const double*>(ib + L.sketch_off);
      const S2Peel peel{reinterpret_cast<const uint64_t*>(ib + L.bitmap_off),
                        nullptr,
                        nullptr,
                        v.res,
                        v.cnt,
                        v.xr,
                        v.claim,
                        v.state,
                        v.val,
                        s2_salt(p.seed, p.call, p.offset_key),
                        L.rows,
                        L.counters,
                        S2Unit{0.0, 0.0}};  // k_s2_output sets it from the scale
      cudaMemsetAsync(w.emax, 0, sizeof(int), s);
      cudaMemsetAsync(v.cnt, 0, nc * 4, s);
      cudaMemsetAsync(v.xr, 0, nc * 8, s);
      cudaMemsetAsync(v.claim, 0xff, n * 4, s);
      cudaMemsetAsync(v.pure, 0, kS2PeelRounds * 8, s);
      const unsigned gc = blocks_for(nc, kThreads), gr = gc < kS2RoundBlocks ? gc : kS2RoundBlocks;
      SCCL_LAUNCH(gr, kThreads, 0, s, k_s2_emax)(sk, nc, w.emax, err);
      SCCL_LAUNCH(gc, kThreads, 0, s, k_s2_fix)(sk, nc, w.emax, v.res, err);
      SCCL_LAUNCH(grid_for(n), kThreads, 0, s, k_s2_init)(peel, n, w.stats + 2, err);
      for (int r = 0; r < kS2PeelRounds; ++r) {
        SCCL_LAUNCH(gr, kThreads, 0, s, k_s2_claim)(peel, nc, r, v.pure, err);
        SCCL_LAUNCH(gr, kThreads, 0, s, k_s2_resolve)(peel, nc, r, v.pure, err);
      }
      if (unresolved_dev != nullptr) cudaMemsetAsync(unresolved_dev, 0, bitmap_words(n) * 8, s);
      SCCL_LAUNCH(grid_for(n), kThreads, 0, s, k_s2_output<ET>)
      (peel, w.emax, reinterpret_cast<const uint64_t*>(ib + L.nf_off), n, y, scale, w.stats,
       reinterpret_cast<unsigned long long*>(unresolved_dev), err);
    }
  });
  SCCL_RETURN_IF_ERROR(st);
  if (stats_dev) SCCL_LAUNCH(1, 1, 0, s, k_stats_out)(w.stats, stats_dev, err);
  return Status::Ok();
}

namespace {

// Every instantiation the launch code above can pick for element type ET, codec by codec of the
// table, for preload_codec_kernels (a kernel named twice loads once).
template <int ET>
void preload_typed(size_t* local, cudaError_t* err) {
  for (int i = 0; i < kNumCodecs; ++i) {
    with_codec(CodecId(i), [&](auto codec) {
      constexpr CodecInfo c = decltype(codec)::info;
      if constexpr (c.family == CodecFamily::kLinear && c.bits > 0) {
        preload_one(k_quant<c.bits, ET, c.rotated>, local, err);
        preload_one(k_quant_decode<c.bits, ET, c.rotated>, local, err);
      } else if constexpr (c.family == CodecFamily::kLinear) {
        preload_one(k_cast<int(c.wire), ET>, local, err);
        preload_one(k_cast_decode<int(c.wire), ET>, local, err);
      } else if constexpr (c.family == CodecFamily::kCasq) {
        preload_one(k_casq_combine<c.bits, ET>, local, err);
        preload_one(k_casq_mark<ET>, local, err);
        preload_one(k_casq_fit<ET>, local, err);
        preload_one(k_casq_codes<c.bits, ET>, local, err);
        preload_one(k_casq_decode<c.bits, ET>, local, err);
      } else if constexpr (c.family == CodecFamily::kS2) {
        preload_one(k_s2_accumulate<ET>, local, err);
        preload_one(k_s2_output<ET>, local, err);
      }
    });
  }
}

}  // namespace

cudaError_t preload_codec_kernels(size_t* max_local_bytes) {
  cudaError_t err = cudaSuccess;
  preload_typed<int(ElemType::kF32)>(max_local_bytes, &err);
  preload_typed<int(ElemType::kF16)>(max_local_bytes, &err);
  preload_typed<int(ElemType::kBf16)>(max_local_bytes, &err);
  preload_one(k_validate, max_local_bytes, &err);
  preload_one(k_s2_emax, max_local_bytes, &err);
  preload_one(k_s2_fix, max_local_bytes, &err);
  preload_one(k_s2_init, max_local_bytes, &err);
  preload_one(k_s2_claim, max_local_bytes, &err);
  preload_one(k_s2_resolve, max_local_bytes, &err);
  preload_one(k_stats_out, max_local_bytes, &err);
  return err;
}

cudaError_t preload_kernels(size_t* max_local_bytes) {
  cudaError_t e = preload_codec_kernels(max_local_bytes);
  const cudaError_t e2 = preload_sparse_kernels(max_local_bytes);
  const cudaError_t e3 = preload_ef_kernels(max_local_bytes);
  const cudaError_t e4 = preload_sum_kernels(max_local_bytes);
  return e != cudaSuccess ? e : e2 != cudaSuccess ? e2 : e3 != cudaSuccess ? e3 : e4;
}

Status read_device_error(const void* ws, cudaStream_t s) {
  int v = 0;
  cudaError_t e = cudaMemcpyAsync(&v, ws, sizeof(v), cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) {
    return errorf(Code::kUnhandledCudaError, "codec: reading the device verdict: %s",
                  cudaGetErrorString(e));
  }
  return verdict_status(v);
}

Status verdict_status(int v) {
  static const char* const kWhy[] = {"ok",    "bad magic",         "format version",
                                     "codec", "element count",     "parameters",
                                     "salt",  "CASQ bucket tables"};
  static_assert(sizeof(kWhy) / sizeof(kWhy[0]) == kPacketTables + 1, "one reason per verdict");
  if (v != 0) {
    return errorf(Code::kInvalidArgument, "codec: malformed packet (%s)",
                  v > 0 && v <= kPacketTables ? kWhy[v] : "unknown");
  }
  return Status::Ok();
}

}  // namespace sketchccl::kernels::cuda
