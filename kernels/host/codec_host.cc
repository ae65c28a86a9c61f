// CPU build of the codecs: the SCCL_HD routines of kernels/codec_impl.h driven by plain loops.
// This is what the host backend and every test use; kernels/cuda/ drives the same routines.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/casq_fit.h"
#include "kernels/codec.h"
#include "kernels/codec_impl.h"
#include "kernels/codec_internal.h"
#include "kernels/host/codec_paths.h"
#include "kernels/host/cpu_path.h"
#if defined(SCCL_X86_SIMD)
#include <cpuid.h>
#endif
#include "kernels/s2_decode_host.h"

namespace sketchccl::kernels {

using namespace detail;  // NOLINT: this file is the detail routines' driver

namespace {

Status bad(const char* fmt, const char* what) {
  return errorf(Code::kInvalidArgument, fmt, what);
}

}  // namespace

namespace detail {

Status check_params(const CodecParams& p, size_t n) {
  const CodecInfo* info = codec_info(p.codec);
  if (info == nullptr) {
    return errorf(Code::kInvalidArgument, "codec: unknown codec id %d", int(p.codec));
  }
  if (info->family == CodecFamily::kSparse) {
    return bad("codec %s: two-phase, use the helpers of kernels/sparse.h", info->name);
  }
  if (n > kMaxElems) {
    return errorf(Code::kInvalidArgument, "codec %s: %zu elements exceed the limit of 2^40",
                  codec_name(p.codec), n);
  }
  if (info->family == CodecFamily::kS2) {
    if (p.s2_rows < 1 || p.s2_rows > kMaxS2Rows) {
      return errorf(Code::kInvalidArgument, "codec s2: %u rows, expected 1 to %u", p.s2_rows,
                    kMaxS2Rows);
    }
    if (p.s2_counters < 1 || p.s2_counters > kMaxS2Counters) {
      return errorf(Code::kInvalidArgument, "codec s2: %u counters per row, expected 1 to 2^30",
                    p.s2_counters);
    }
  }
  return Status::Ok();
}

size_t bytes_unchecked(const CodecParams& p, size_t n) {
  const size_t h = sizeof(PacketHeader);
  const CodecInfo* info = codec_info(p.codec);
  if (info == nullptr) return 0;
  switch (info->family) {
    case CodecFamily::kLinear:
      if (info->bits == 0) return h + round8(n * elem_size(info->wire));  // a cast
      return h + div_up(n, kBlock) * q_record_bytes(info->bits);
    case CodecFamily::kCasq:
      return casq_layout(info->bits, n).total;
    case CodecFamily::kS2:
      return s2_layout(p.s2_rows, p.s2_counters, n).total;
    case CodecFamily::kSparse:
      break;
  }
  return 0;
}

PacketHeader expected_header(const CodecParams& p, size_t n) {
  PacketHeader hd;
  memset(&hd, 0, sizeof(hd));
  hd.magic = kMagic;
  hd.version = kVersion;
  hd.codec = uint8_t(p.codec);
  hd.bits = uint8_t(codec_bits(p.codec));
  hd.n = n;
  if (is_quant(p.codec)) hd.p0 = uint32_t(kBlock);
  if (is_casq(p.codec)) {
    CasqLayout L = casq_layout(hd.bits, n);
    hd.p0 = L.buckets;
    hd.p1 = L.clusters;
    hd.salt = stream_key(p.seed, p.call, p.offset_key, p.step) ^ 0xca5ca5ull;
  }
  if (codec_family(p.codec) == CodecFamily::kS2) {
    hd.rows = uint8_t(p.s2_rows);
    hd.p0 = p.s2_counters;
    hd.salt = s2_salt(p.seed, p.call, p.offset_key);
  }
  return hd;
}

// ---- the CPU path ------------------------------------------------------------------------------
namespace {
thread_local int t_forced_path = -1;  // a CpuPathScope's choice on this thread, else -1

CpuPath best_cpu_path() {
#if defined(SCCL_X86_SIMD)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return CpuPath::kAvx512;
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && f16c) return CpuPath::kAvx2;
#endif
  return CpuPath::kGeneric;
}
}  // namespace

bool cpu_path_available(CpuPath p) {
  static const CpuPath best = best_cpu_path();
  return int(p) <= int(best);  // each path's CPU has the features of the ones below
}

CpuPath cpu_path() {
  static const CpuPath best = best_cpu_path();
  return t_forced_path >= 0 ? CpuPath(t_forced_path) : best;
}

CpuPathScope::CpuPathScope(CpuPath p) : prev_(t_forced_path) {
  t_forced_path = cpu_path_available(p) ? int(p) : int(CpuPath::kGeneric);
}
CpuPathScope::~CpuPathScope() {
  t_forced_path = prev_;
}

void put_header(const CodecParams& p, size_t n, void* pkt) {
  PacketHeader h = expected_header(p, n);
  memcpy(pkt, &h, sizeof(h));
}

}  // namespace detail

namespace {

Status check_out(const CodecParams& p, size_t n, const void* x, void* pkt, size_t cap,
                 size_t* need) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  *need = bytes_unchecked(p, n);
  if (pkt == nullptr || (reinterpret_cast<uintptr_t>(pkt) & 7u) != 0) {
    return bad("codec %s: output packet is null or not 8-byte aligned", codec_name(p.codec));
  }
  if (cap < *need) {
    return errorf(Code::kInvalidArgument, "codec %s: output capacity %zu < packet size %zu",
                  codec_name(p.codec), cap, *need);
  }
  if (n > 0 && x == nullptr) return bad("codec %s: null input", codec_name(p.codec));
  return Status::Ok();
}

// Validates a received packet against what the caller expects, before any payload access.
Status check_packet(const CodecParams& p, size_t n, const void* pkt, size_t bytes) {
  SCCL_RETURN_IF_ERROR(check_params(p, n));
  const char* name = codec_name(p.codec);
  if (pkt == nullptr || (reinterpret_cast<uintptr_t>(pkt) & 7u) != 0) {
    return bad("codec %s: packet is null or not 8-byte aligned", name);
  }
  if (bytes < sizeof(PacketHeader)) {
    return errorf(Code::kInvalidArgument, "codec %s: truncated packet (%zu bytes, no header)", name,
                  bytes);
  }
  PacketHeader h, e = expected_header(p, n);
  memcpy(&h, pkt, sizeof(h));
  switch (header_verdict(h, e)) {
    case kPacketOk:
      break;
    case kPacketMagic:
      return bad("codec %s: bad packet magic", name);
    case kPacketVersion:
      return errorf(Code::kInvalidArgument, "codec %s: packet format version %u, expected %u", name,
                    h.version, kVersion);
    case kPacketCodec:
      return errorf(Code::kInvalidArgument, "codec %s: packet holds codec %s (id %u)", name,
                    codec_info(CodecId(h.codec)) ? codec_name(CodecId(h.codec)) : "?", h.codec);
    case kPacketCount:
      return errorf(Code::kInvalidArgument, "codec %s: packet holds %llu elements, expected %zu",
                    name, static_cast<unsigned long long>(h.n), n);
    case kPacketParams:
      return errorf(Code::kInvalidArgument,
                    "codec %s: packet parameters (bits %u rows %u p0 %u p1 %u) differ from the "
                    "expected (bits %u rows %u p0 %u p1 %u)",
                    name, h.bits, h.rows, h.p0, h.p1, e.bits, e.rows, e.p0, e.p1);
    case kPacketSalt:
      return errorf(Code::kInvalidArgument,
                    "codec %s: packet salt %016llx, expected %016llx (another seed, call or "
                    "slice, or a corrupted header)",
                    name, static_cast<unsigned long long>(h.salt),
                    static_cast<unsigned long long>(e.salt));
    default:
      break;
  }
  const size_t need = bytes_unchecked(p, n);
  if (bytes < need) {
    return errorf(Code::kInvalidArgument, "codec %s: truncated packet (%zu bytes, expected %zu)",
                  name, bytes, need);
  }
  if (is_casq(p.codec) &&
      casq_tables_verdict(static_cast<const uint8_t*>(pkt) + sizeof(PacketHeader), e) != 0) {
    return bad("codec %s: bucket table sizes in the packet are empty or do not add up", name);
  }
  return Status::Ok();
}

template <typename F>
Status by_type(ElemType t, F&& f) {
  if (!for_elem_type(t, f)) {
    return errorf(Code::kInvalidArgument, "codec: unknown element type %d", int(t));
  }
  return Status::Ok();
}

template <int ET, typename F>
uint64_t store_all(void* y, size_t n, float scale, F&& value) {
  uint64_t nz = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = value(i) * scale;  // packets hold only qnan(): the product keeps it (x86)
    nz += v != 0.0f;
    store_elem<ET>(y, i, v);
  }
  return nz;
}

// ---- fp16, q* and CASQ: one set of drivers per CPU path (kernels/host/codec_paths.h) ---------
void fp16_cast(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
  cpu_path_drivers().half_run(a, x, n, o);
}
uint64_t fp16_decode(const uint16_t* a, size_t n, float scale, float* y) {
  return cpu_path_drivers().half_decode(a, n, scale, y);
}
void bf16_cast(const uint16_t* a, const float* x, size_t n, uint16_t* o) {
  cpu_path_drivers().bf16_run(a, x, n, o);
}
uint64_t bf16_decode(const uint16_t* a, size_t n, float scale, float* y) {
  return cpu_path_drivers().bf16_decode(a, n, scale, y);
}

}  // namespace

namespace detail {
void cpu_nonzero_words(const float* x, size_t words, uint64_t* bits) {
  cpu_path_drivers().nonzero_words(x, words, bits);
}
size_t cpu_scatter_words(const uint64_t* bits, size_t words, const float* vals, float scale,
                         float* y) {
  return cpu_path_drivers().scatter_words(bits, words, vals, scale, y);
}
}  // namespace detail

namespace {

// ---- casts: `w` is the codec's wire element type (kernels/codecs.def) ---------------------------
template <int ET>
SCCL_CPU_CLONES void cast_run(ElemType w, const uint8_t* in, const void* x, size_t n,
                              uint8_t* out) {
  if (w == ElemType::kF32) {
    const float* a = reinterpret_cast<const float*>(in);
    float* o = reinterpret_cast<float*>(out);
    if (a) {
      for (size_t i = 0; i < n; ++i)
        o[i] = canon_nan(a[i] + load_elem<ET>(x, i));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = canon_nan(load_elem<ET>(x, i));
    }
    return;
  }
  const uint16_t* a = reinterpret_cast<const uint16_t*>(in);
  uint16_t* o = reinterpret_cast<uint16_t*>(out);
  // Encode converts x itself (no 0 + x, which would turn -0 into +0), as the CUDA build does.
  // Encode and step as separate loops, so that each vectorizes.
  if (w == ElemType::kBf16) {
    if constexpr (ET == int(ElemType::kF32)) {  // the path's loops
      bf16_cast(a, static_cast<const float*>(x), n, o);
      return;
    }
    if (a) {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(bf16_to_float(a[i]) + load_elem<ET>(x, i)));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(load_elem<ET>(x, i)));
    }
  } else {
    if constexpr (ET == int(ElemType::kF32)) {  // the path's conversions (F16C)
      fp16_cast(a, static_cast<const float*>(x), n, o);
      return;
    }
    if (a) {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_half(canon_nan(half_to_float(a[i]) + load_elem<ET>(x, i)));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_half(canon_nan(load_elem<ET>(x, i)));
    }
  }
}

template <int ET>
SCCL_CPU_CLONES uint64_t cast_decode(ElemType w, const uint8_t* in, size_t n, void* y,
                                     float scale) {
  if (w == ElemType::kF32) {
    const float* a = reinterpret_cast<const float*>(in);
    return store_all<ET>(y, n, scale, [&](size_t i) { return a[i]; });
  }
  const uint16_t* a = reinterpret_cast<const uint16_t*>(in);
  if (w == ElemType::kBf16) {
    if constexpr (ET == int(ElemType::kF32))
      return bf16_decode(a, n, scale, static_cast<float*>(y));
    return store_all<ET>(y, n, scale, [&](size_t i) { return bf16_to_float(a[i]); });
  }
  if constexpr (ET == int(ElemType::kF32)) return fp16_decode(a, n, scale, static_cast<float*>(y));
  return store_all<ET>(y, n, scale, [&](size_t i) { return half_to_float(a[i]); });
}

// The codec's quantizer or CASQ width, from the table, on the path cpu_path() picks.
template <int ET>
void q_dispatch(const CodecParams& p, const uint8_t* in, const void* x, size_t n, uint8_t* out) {
  cpu_path_drivers().q_run(ElemType(ET), p, in, x, n, out);
}
template <int ET>
uint64_t q_decode_any(const CodecParams& p, const uint8_t* in, size_t n, void* y, float scale) {
  return cpu_path_drivers().q_decode(ElemType(ET), p, in, n, y, scale);
}
template <int ET>
void casq_dispatch(const CodecParams& p, const uint8_t* in, const void* x, size_t n, uint8_t* out) {
  cpu_path_drivers().casq_run(ElemType(ET), p, in, x, n, out);
}
template <int ET>
uint64_t casq_decode_dispatch(const CodecParams& p, const uint8_t* pkt, size_t n, void* y,
                              float scale) {
  return cpu_path_drivers().casq_decode(ElemType(ET), p, pkt, n, y, scale);
}

// ---- s2 --------------------------------------------------------------------------------------

// Adds x's finite non-zeros to the bitmap and sketch of out (zeroed or holding a packet).
template <int ET>
void s2_accumulate(const CodecParams& p, const void* x, size_t n, uint8_t* out) {
  const S2Layout L = s2_layout(p.s2_rows, p.s2_counters, n);
  const uint64_t salt = s2_salt(p.seed, p.call, p.offset_key);
  uint64_t* bm = reinterpret_cast<uint64_t*>(out + L.bitmap_off);
  uint64_t* nf = reinterpret_cast<uint64_t*>(out + L.nf_off);
  double* sk = reinterpret_cast<double*>(out + L.sketch_off);
  for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
    const size_t cnt = std::min(kBlock, n - base);
    uint32_t m = 0;  // the largest |v| as bits: non-finite at or above Inf's
    for (size_t j = 0; j < cnt; ++j) {
      const uint32_t b = f2u(load_elem<ET>(x, base + j)) & 0x7fffffffu;
      m = b > m ? b : m;
    }
    if (m >= 0x7f800000u) nf[blk >> 6] |= 1ull << (blk & 63);
    if (bit_get(nf, blk)) continue;  // decodes as NaN anyway (also when an earlier rank set it)
    // The non-zeros by words of 64 (the path's compares for whole fp32 words), in order.
    uint64_t words[kBlock / 64];
    const size_t nw = div_up(cnt, 64);
    if (ET == int(ElemType::kF32) && cnt == kBlock) {
      cpu_nonzero_words(static_cast<const float*>(x) + base, nw, words);
    } else {
      for (size_t w = 0; w < nw; ++w) {
        words[w] = 0;
        for (size_t j = 64 * w; j < std::min(cnt, 64 * w + 64); ++j)
          words[w] |= uint64_t(load_elem<ET>(x, base + j) != 0.0f) << (j - 64 * w);
      }
    }
    for (size_t w = 0; w < nw; ++w) {
      for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
        const size_t i = base + 64 * w + size_t(__builtin_ctzll(bits));
        const float v = load_elem<ET>(x, i);
        bm[i >> 6] |= 1ull << (i & 63);
        for (uint32_t r = 0; r < L.rows; ++r) {
          bool neg;
          uint32_t b = s2_bucket(salt, r, i, L.counters, &neg);
          sk[size_t(r) * L.counters + b] += neg ? -double(v) : double(v);
        }
      }
    }
  }
}

}  // namespace

bool codec_from_name(const char* name, CodecId* out) {
  if (name == nullptr) return false;
  for (const CodecInfo& c : kCodecs) {
    if (strcmp(name, c.name) == 0) {
      *out = c.id;
      return true;
    }
  }
  return false;
}

const char* codec_name(CodecId id) {
  const CodecInfo* info = codec_info(id);
  return info != nullptr ? info->name : "unknown";
}

size_t elem_size(ElemType t) {
  return t == ElemType::kF32 ? 4 : 2;
}

size_t packet_bytes(const CodecParams& p, size_t n) {
  if (!check_params(p, n).ok()) return 0;
  return bytes_unchecked(p, n);
}

uint32_t s2_counters_for_budget(size_t n, uint32_t rows, double budget) {
  if (rows == 0) rows = 1;
  double c = std::ceil(budget * double(n) / rows);
  return uint32_t(std::clamp(c, double(kS2MinCounters), double(kMaxS2Counters)));
}

uint32_t s2_counters_for_support(uint64_t support, uint32_t rows, double per_nonzero) {
  if (rows == 0) rows = 1;
  double c = std::ceil(per_nonzero * double(support) / rows);
  return uint32_t(std::clamp(c, double(kS2MinCounters), double(kMaxS2Counters)));
}

Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt, size_t cap) {
  size_t need = 0;
  SCCL_RETURN_IF_ERROR(check_out(p, n, x, pkt, cap, &need));
  uint8_t* out = static_cast<uint8_t*>(pkt);
  // q* writes every byte of its records: no need to clear them first.
  memset(out, 0, is_quant(p.codec) ? sizeof(PacketHeader) : need);
  put_header(p, n, out);
  uint8_t* body = out + sizeof(PacketHeader);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    switch (codec_family(p.codec)) {
      case CodecFamily::kLinear:
        if (is_quant(p.codec)) {
          q_dispatch<ET>(p, nullptr, x, n, body);
        } else {
          cast_run<ET>(codec_info(p.codec)->wire, nullptr, x, n, body);
        }
        break;
      case CodecFamily::kCasq: {
        casq_dispatch<ET>(p, nullptr, x, n, out);
        break;
      }
      case CodecFamily::kS2:
        s2_accumulate<ET>(p, x, n, out);
        break;
      case CodecFamily::kSparse:
        break;  // refused by check_params
    }
  });
}

Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
            size_t n, void* out, size_t cap) {
  SCCL_RETURN_IF_ERROR(check_packet(p, n, in, in_bytes));
  size_t need = 0;
  SCCL_RETURN_IF_ERROR(check_out(p, n, x, out, cap, &need));
  const uint8_t* ib = static_cast<const uint8_t*>(in);
  uint8_t* ob = static_cast<uint8_t*>(out);
  if (codec_family(p.codec) == CodecFamily::kCasq) {
    // Not linear: decode, add, refit, re-encode. casq_run reads each part of `in` before it
    // writes that part of `out`, so in == out works; a partial overlap goes through a copy.
    thread_local std::vector<uint64_t> copy;
    if (ob != ib && ob < ib + need && ib < ob + need) {
      copy.resize(need / 8);
      memcpy(copy.data(), ib, need);
      ib = reinterpret_cast<const uint8_t*>(copy.data());
    }
    return by_type(t, [&](auto et) { casq_dispatch<decltype(et)::value>(p, ib, x, n, ob); });
  }
  // q* rewrites every record (reading each before writing it, so in may alias out); the casts
  // leave the padding after the last element, which must come along.
  if (ob != ib && !is_quant(p.codec)) memmove(ob, ib, need);
  put_header(p, n, ob);  // the producing step's header (q*, casq carry step-specific salts)
  uint8_t* body = ob + sizeof(PacketHeader);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (codec_family(p.codec) == CodecFamily::kS2) {
      s2_accumulate<ET>(p, x, n, ob);
    } else if (is_quant(p.codec)) {
      q_dispatch<ET>(p, ib + sizeof(PacketHeader), x, n, body);
    } else {
      cast_run<ET>(codec_info(p.codec)->wire, body, x, n, body);
    }
  });
}

Status decode(const CodecParams& p, const void* pkt, size_t pkt_bytes, void* y, ElemType t,
              size_t n, float scale, DecodeStats* stats) {
  SCCL_RETURN_IF_ERROR(check_packet(p, n, pkt, pkt_bytes));
  if (n > 0 && y == nullptr) return bad("codec %s: null output", codec_name(p.codec));
  DecodeStats local;
  DecodeStats* st = stats ? stats : &local;
  st->set_counts(DecodeStats());
  const uint8_t* b = static_cast<const uint8_t*>(pkt);
  const uint8_t* body = b + sizeof(PacketHeader);
  return by_type(t, [&](auto et) {
    constexpr int ET = decltype(et)::value;
    if (is_quant(p.codec)) {
      st->nonzeros = q_decode_any<ET>(p, body, n, y, scale);
    } else if (is_casq(p.codec)) {
      st->nonzeros = casq_decode_dispatch<ET>(p, b, n, y, scale);
    } else if (codec_family(p.codec) == CodecFamily::kS2) {
      // Peeling in rounds over exact fixed-point residuals (kernels/s2_peel.h), as on the GPU.
      thread_local S2HostDecode d;
      s2_peel_host(p, b, n, 0, &d, st);
      const uint64_t* nf =
          reinterpret_cast<const uint64_t*>(b + s2_layout(p.s2_rows, p.s2_counters, n).nf_off);
      // Outside the support: what s2_output gives there (0 times the scale, or NaN).
      const float zero = canon_nan(0.0f * scale);
      for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
        const float v = bit_get(nf, blk) ? qnan() : zero;
        const size_t end = std::min(n, base + kBlock);  // a local bound: the loop vectorizes
        for (size_t i = base; i < end; ++i)
          store_elem<ET>(y, i, v);
      }
      for (size_t k = 0; k < d.pos.size(); ++k)
        store_elem<ET>(y, d.pos[k], s2_output(d.s, nf, k, scale));
      if (st->unresolved != nullptr) s2_unresolved_bits(d, nf, n, st->unresolved);
    } else {
      st->nonzeros = cast_decode<ET>(codec_info(p.codec)->wire, body, n, y, scale);
    }
  });
}

}  // namespace sketchccl::kernels
