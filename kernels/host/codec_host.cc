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
#include "kernels/s2_decode_host.h"

namespace sketchccl::kernels {

using namespace detail;  // NOLINT: this file is the detail routines' driver

// The linear codecs' loops are compiled for the baseline x86-64 and for x86-64-v2 (SSE4.2: 32-bit
// multiplies and min/max, which the hash and the range need), v3 (AVX2) and v4 (AVX-512),
// picked once at load time by the CPU (GCC function multi-versioning). Only the
// vector width differs: no FMA contraction (-ffp-contract=off), the same IEEE operations, so
// every clone writes the same bytes (tests/unit/kernels/codec_golden_test.cc pins them).
// -DSCCL_NO_CPU_CLONES builds the baseline alone (to measure it).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__) && \
    !defined(SCCL_NO_CPU_CLONES)
#define SCCL_CPU_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v2", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define SCCL_CPU_CLONES
#endif

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

void put_header(const CodecParams& p, size_t n, void* pkt) {
  PacketHeader h = expected_header(p, n);
  memcpy(pkt, &h, sizeof(h));
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
    if (a) {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(bf16_to_float(a[i]) + load_elem<ET>(x, i)));
    } else {
      for (size_t i = 0; i < n; ++i)
        o[i] = float_to_bf16(canon_nan(load_elem<ET>(x, i)));
    }
  } else {
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
    return store_all<ET>(y, n, scale, [&](size_t i) { return bf16_to_float(a[i]); });
  }
  return store_all<ET>(y, n, scale, [&](size_t i) { return half_to_float(a[i]); });
}

// ---- q* --------------------------------------------------------------------------------------
template <uint32_t BITS, int ET>
SCCL_CPU_CLONES void q_run(const CodecParams& p, const uint8_t* in, const void* x, size_t n,
                           uint8_t* out) {
  const uint64_t key = stream_key(p.seed, p.call, p.offset_key, p.step);
  const size_t R = q_record_bytes(BITS);
  const size_t whole = n / kBlock;
  // Whole blocks with a constant count (and encode apart from step), so each loop vectorizes.
  if (in != nullptr) {
    for (size_t blk = 0; blk < whole; ++blk)
      q_step_block<BITS, ET>(in + blk * R, x, blk * kBlock, kBlock, q_block_key(key, blk),
                             out + blk * R);
  } else {
    for (size_t blk = 0; blk < whole; ++blk)
      q_step_block<BITS, ET>(nullptr, x, blk * kBlock, kBlock, q_block_key(key, blk),
                             out + blk * R);
  }
  if (n > whole * kBlock) {
    q_step_block<BITS, ET>(in ? in + whole * R : nullptr, x, whole * kBlock, n - whole * kBlock,
                           q_block_key(key, whole), out + whole * R);
  }
}

template <uint32_t BITS, int ET>
SCCL_CPU_CLONES uint64_t q_decode(const uint8_t* in, size_t n, void* y, float scale) {
  const size_t R = q_record_bytes(BITS);
  float v[kBlock];
  uint64_t nz = 0;
  for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
    size_t cnt = std::min(kBlock, n - base);
    q_unpack_record<BITS>(in + blk * R, cnt, v);
    for (size_t j = 0; j < cnt; ++j) {
      float o = v[j] * scale;
      nz += o != 0.0f;
      store_elem<ET>(y, base + j, o);
    }
  }
  return nz;
}

// The codec's quantizer (a linear codec with bits per code), from the table.
template <int ET>
void q_dispatch(const CodecParams& p, const uint8_t* in, const void* x, size_t n, uint8_t* out) {
  with_codec(p.codec, [&](auto codec) {
    constexpr CodecInfo c = decltype(codec)::info;
    if constexpr (c.family == CodecFamily::kLinear && c.bits > 0)
      q_run<c.bits, ET>(p, in, x, n, out);
  });
}
template <int ET>
uint64_t q_decode_any(const CodecParams& p, const uint8_t* in, size_t n, void* y, float scale) {
  uint64_t nz = 0;
  with_codec(p.codec, [&](auto codec) {
    constexpr CodecInfo c = decltype(codec)::info;
    if constexpr (c.family == CodecFamily::kLinear && c.bits > 0)
      nz = q_decode<c.bits, ET>(in, n, y, scale);
  });
  return nz;
}

// ---- CASQ ------------------------------------------------------------------------------------

// Marks blocks holding a non-finite value of x in nf (nf_words(n) words, zeroed by the caller)
// and writes each finite block's scale (0 for a non-finite block): one integer maximum of the
// values' magnitude bits per block (casq_abs_bits), which also tells finiteness.
template <int ET>
void casq_mark(const void* x, size_t n, uint64_t* nf, float* scales) {
  for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
    const size_t cnt = std::min(kBlock, n - base);
    uint32_t m = 0;
    for (size_t j = 0; j < cnt; ++j) {
      const uint32_t b = casq_abs_bits(load_elem<ET>(x, base + j));
      m = b > m ? b : m;
    }
    if (!casq_bits_finite(m)) nf[blk >> 6] |= 1ull << (blk & 63);
    scales[blk] = casq_scale(m);
  }
}

// Codes of one block's cnt values (fp32) into c[]: the flat loop the compiler vectorises. The
// fp32 instances are compiled twice (AVX2 and baseline, picked at load time): the same IEEE
// operations without fused multiply-adds, so the same codes, 8 lanes wide with native 32-bit
// multiplies for the hash.
template <uint32_t K, int ET>
__attribute__((always_inline)) inline void casq_block_codes(const void* x, size_t base,
                                                            uint32_t cnt, float sc,
                                                            const float* lvl, const float* inv,
                                                            uint32_t bkey, bool nearest,
                                                            uint8_t* __restrict c) {
  float l[K], iv[K];  // locals: the byte stores to c cannot alias them
  for (uint32_t k = 0; k < K; ++k) {
    l[k] = lvl[k];
    iv[k] = inv[k];
  }
  uint8_t tmp[kBlock];
  for (uint32_t j = 0; j < cnt; ++j)
    tmp[j] = uint8_t(casq_elem_code<K>(load_elem<ET>(x, base + j), sc, l, iv, bkey, j, nearest));
  memcpy(c, tmp, cnt);
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SCCL_CASQ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SCCL_CASQ_CLONES
#endif
SCCL_CASQ_CLONES void casq_block_codes_f32_4(const void* x, size_t base, uint32_t cnt, float sc,
                                             const float* lvl, const float* inv, uint32_t bkey,
                                             bool nearest, uint8_t* c) {
  casq_block_codes<4, 0>(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
}
SCCL_CASQ_CLONES void casq_block_codes_f32_8(const void* x, size_t base, uint32_t cnt, float sc,
                                             const float* lvl, const float* inv, uint32_t bkey,
                                             bool nearest, uint8_t* c) {
  casq_block_codes<8, 0>(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
}
SCCL_CASQ_CLONES void casq_block_codes_f32_16(const void* x, size_t base, uint32_t cnt, float sc,
                                              const float* lvl, const float* inv, uint32_t bkey,
                                              bool nearest, uint8_t* c) {
  casq_block_codes<16, 0>(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
}

// Encodes x (already combined) with the non-finite block mask nf and the block scales into a
// CASQ packet body.
template <uint32_t BITS, int ET>
void casq_encode_bits(const CodecParams& p, const void* x, size_t n, const uint64_t* nf,
                      const float* scales, uint8_t* out) {
  constexpr uint32_t K = 1u << BITS;  // compile-time: the code search and packing unroll
  const CasqLayout L = casq_layout(BITS, n);
  const uint64_t key = stream_key(p.seed, p.call, p.offset_key, p.step);
  const uint32_t S = uint32_t(std::min<size_t>(n, kCasqSample));
  // The fit's scratch, kept per thread: allocating it per slice costs more.
  thread_local std::unique_ptr<CasqFitScratch> scratch(new CasqFitScratch);
  thread_local std::unique_ptr<CasqPartials> partials(new CasqPartials);
  CasqFitScratch* f = scratch.get();
  for (uint32_t k = 0; k < S; ++k) {
    const size_t i = casq_sample_index(key, n, S, k);
    f->sample[k] = casq_unit(load_elem<ET>(x, i), scales[i / kBlock]);  // 0 if not finite
  }
  CasqHostExec ex{partials.get()};
  casq_fit(ex, S, BITS, key, f);
  float lvl[K], inv[K];
  for (uint32_t c = 0; c < K; ++c) {
    lvl[c] = f->centers[c];
    inv[c] = f->inv[c];
    const uint32_t one = 1;
    memcpy(out + L.sizes_off + 4 * c, &one, 4);
  }
  memcpy(out + L.table_off, lvl, 4 * K);
  if (n > 0) {  // an empty slice has no mask and no scales (null pointers)
    memcpy(out + L.nf_off, nf, nf_words(n) * 8);
    memcpy(out + L.scales_off, scales, div_up(n, kBlock) * 4);
  }
  uint8_t* codes = out + L.codes_off;
  // Per block: the codes in a flat loop over its values (vectorisable: selects, a 32-bit hash,
  // one division), then packed by groups of 8.
  for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
    const uint32_t cnt = uint32_t(std::min(kBlock, n - base));
    uint8_t* bc = codes + base / kGroup * BITS;
    if (bit_get(nf, blk)) {
      memset(bc, 0, div_up(cnt, kGroup) * BITS);
      continue;
    }
    const uint32_t bkey = casq_block_key(key, blk);
    const float sc = scales[blk];
    const bool nearest = p.casq_nearest;
    uint8_t c[kBlock];
    if constexpr (ET != 0) {
      casq_block_codes<K, ET>(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
    } else if constexpr (K == 4) {
      casq_block_codes_f32_4(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
    } else if constexpr (K == 8) {
      casq_block_codes_f32_8(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
    } else {
      casq_block_codes_f32_16(x, base, cnt, sc, lvl, inv, bkey, nearest, c);
    }
    for (uint32_t j = cnt; j < div_up(cnt, kGroup) * kGroup; ++j)
      c[j] = 0;
    for (uint32_t g = 0; g * kGroup < cnt; ++g)
      store_le<BITS>(bc + g * BITS, casq_pack<BITS>(c + g * kGroup));
  }
}

// The encode of the codec's bits, from the table.
template <int ET>
void casq_encode_body(const CodecParams& p, const void* x, size_t n, const uint64_t* nf,
                      const float* scales, uint8_t* out) {
  with_codec(p.codec, [&](auto codec) {
    constexpr CodecInfo c = decltype(codec)::info;
    if constexpr (c.family == CodecFamily::kCasq)
      casq_encode_bits<c.bits, ET>(p, x, n, nf, scales, out);
  });
}

// Values of one block (cnt of them, padded to a group) from its codes: unpacked by groups, then
// a flat loop of selects among the K levels times the scale (vectorised; the value is
// casq_group_values's: lvl[code] * s, NaN in a non-finite block).
template <uint32_t BITS>
__attribute__((always_inline)) inline void casq_block_values(const uint8_t* bc, uint32_t cnt,
                                                             bool nan_block, float s,
                                                             const float* lvl, float* out) {
  constexpr uint32_t K = 1u << BITS;
  const uint32_t padded = div_up(cnt, kGroup) * kGroup;
  if (nan_block) {
    for (uint32_t j = 0; j < padded; ++j)
      out[j] = qnan();
    return;
  }
  float l[K];
  for (uint32_t k = 0; k < K; ++k)
    l[k] = lvl[k];
  uint8_t c[kBlock];
  for (uint32_t g = 0; g * kGroup < padded; ++g) {
    const uint64_t w = load_le<BITS>(bc + g * BITS);
    for (uint32_t k = 0; k < kGroup; ++k)
      c[g * kGroup + k] = uint8_t((w >> (k * BITS)) & (K - 1));
  }
  for (uint32_t j = 0; j < padded; ++j) {
    float v = l[0];
    if constexpr (K >= 8) {
      v = l[c[j]];  // a lookup: K - 1 selects cost more
    } else {
      for (uint32_t k = 1; k < K; ++k)
        v = c[j] == k ? l[k] : v;
    }
    out[j] = v * s;
  }
}
SCCL_CASQ_CLONES void casq_block_values_2(const uint8_t* bc, uint32_t cnt, bool nan_block, float s,
                                          const float* lvl, float* out) {
  casq_block_values<2>(bc, cnt, nan_block, s, lvl, out);
}
SCCL_CASQ_CLONES void casq_block_values_3(const uint8_t* bc, uint32_t cnt, bool nan_block, float s,
                                          const float* lvl, float* out) {
  casq_block_values<3>(bc, cnt, nan_block, s, lvl, out);
}
SCCL_CASQ_CLONES void casq_block_values_4(const uint8_t* bc, uint32_t cnt, bool nan_block, float s,
                                          const float* lvl, float* out) {
  casq_block_values<4>(bc, cnt, nan_block, s, lvl, out);
}

// Reads a validated CASQ packet.
struct CasqReader {
  const float* table;
  const float* scales;
  const uint64_t* nf;
  const uint8_t* codes;
  uint32_t bits;
  CasqReader(const CodecParams& p, const uint8_t* pkt, size_t n) {
    bits = codec_bits(p.codec);
    CasqLayout L = casq_layout(bits, n);
    table = reinterpret_cast<const float*>(pkt + L.table_off);
    scales = reinterpret_cast<const float*>(pkt + L.scales_off);
    nf = reinterpret_cast<const uint64_t*>(pkt + L.nf_off);
    codes = pkt + L.codes_off;
  }
  // Values of group g (elements 8g ..) into v.
  void group(size_t g, float v[kGroup]) const {
    const size_t blk = g * kGroup / kBlock;
    const bool nan_block = bit_get(nf, blk);
    const float s = scales[blk];
    switch (bits) {
      case 2:
        casq_group_values<2>(load_le<2>(codes + g * 2), nan_block, s, table, v);
        break;
      case 3:
        casq_group_values<3>(load_le<3>(codes + g * 3), nan_block, s, table, v);
        break;
      default:
        casq_group_values<4>(load_le<4>(codes + g * 4), nan_block, s, table, v);
        break;
    }
  }
  // Values of block blk (cnt elements, padded to a group) into out.
  void block(size_t blk, uint32_t cnt, float* out) const {
    const uint8_t* bc = codes + blk * kBlock / kGroup * bits;
    const bool nan_block = bit_get(nf, blk);
    if (bits == 2) {
      casq_block_values_2(bc, cnt, nan_block, scales[blk], table, out);
    } else if (bits == 3) {
      casq_block_values_3(bc, cnt, nan_block, scales[blk], table, out);
    } else {
      casq_block_values_4(bc, cnt, nan_block, scales[blk], table, out);
    }
  }
  // All n values into out.
  void decode_all(size_t n, float* out) const {
    for (size_t g = 0; g * kGroup < n; ++g) {
      float v[kGroup];
      group(g, v);
      store8<0>(out, g * kGroup, uint32_t(std::min<size_t>(kGroup, n - g * kGroup)), v);
    }
  }
};

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
    size_t cnt = std::min(kBlock, n - base);
    bool fin = true;
    for (size_t j = 0; j < cnt; ++j)
      fin &= is_finite(load_elem<ET>(x, base + j));
    if (!fin) nf[blk >> 6] |= 1ull << (blk & 63);
    if (bit_get(nf, blk)) continue;  // decodes as NaN anyway (also when an earlier rank set it)
    for (size_t j = 0; j < cnt; ++j) {
      float v = load_elem<ET>(x, base + j);
      if (v == 0.0f) continue;
      size_t i = base + j;
      bm[i >> 6] |= 1ull << (i & 63);
      for (uint32_t r = 0; r < L.rows; ++r) {
        bool neg;
        uint32_t b = s2_bucket(salt, r, i, L.counters, &neg);
        sk[size_t(r) * L.counters + b] += neg ? -double(v) : double(v);
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
        std::vector<uint64_t> nf(nf_words(n), 0);
        std::vector<float> scales(div_up(n, kBlock));
        casq_mark<ET>(x, n, nf.data(), scales.data());
        casq_encode_body<ET>(p, x, n, nf.data(), scales.data(), out);
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
    // Not linear: decode, add, refit, re-encode (in may alias out: decode first). One pass
    // forms the sum, its non-finite blocks (a NaN block decodes as NaN, so the sum's blocks are
    // the union of both masks and of overflows) and its block scales.
    // Per-thread scratch, kept between calls: a fresh 1 MiB buffer per step costs page faults.
    thread_local std::vector<float> sum, scales;
    if (sum.size() < div_up(n, kGroup) * kGroup) sum.resize(div_up(n, kGroup) * kGroup);
    if (scales.size() < div_up(n, kBlock)) scales.resize(div_up(n, kBlock));
    std::vector<uint64_t> nf(nf_words(n), 0);
    CasqReader rd(p, ib, n);
    float* ps = sum.data();
    Status st = by_type(t, [&](auto et) {
      constexpr int ET = decltype(et)::value;
      for (size_t blk = 0, base = 0; base < n; ++blk, base += kBlock) {
        const uint32_t cnt = uint32_t(std::min(kBlock, n - base));
        rd.block(blk, cnt, ps + base);  // the decoded incoming values (padding: a spare)
        uint32_t m = 0;
        for (uint32_t j = 0; j < cnt; ++j) {
          const float v = ps[base + j] + load_elem<ET>(x, base + j);
          ps[base + j] = v;
          const uint32_t b = casq_abs_bits(v);
          m = b > m ? b : m;
        }
        if (!casq_bits_finite(m)) nf[blk >> 6] |= 1ull << (blk & 63);
        scales[blk] = casq_scale(m);
      }
    });
    SCCL_RETURN_IF_ERROR(st);
    memset(ob, 0, need);
    put_header(p, n, ob);
    casq_encode_body<0>(p, ps, n, nf.data(), scales.data(), ob);
    return Status::Ok();
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
      CasqReader rd(p, b, n);
      uint64_t nz = 0;
      for (size_t g = 0; g * kGroup < n; ++g) {
        float v[kGroup];
        rd.group(g, v);
        const uint32_t c = uint32_t(std::min<size_t>(kGroup, n - g * kGroup));
        for (uint32_t k = 0; k < c; ++k) {
          v[k] *= scale;
          nz += v[k] != 0.0f;
        }
        store8<ET>(y, g * kGroup, c, v);
      }
      st->nonzeros = nz;
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
        for (size_t i = base; i < std::min(n, base + kBlock); ++i)
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
