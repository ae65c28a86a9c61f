// The codec contract (docs/architecture.md), callable from the host. Each codec is written once
// as __host__ __device__ code in kernels/ and compiled twice: for the CPU (kernels/host/) and
// for CUDA (kernels/cuda/). The ring engine (src/coll) only ever sees this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "src/core/status.h"

namespace sketchccl::kernels {

// Element types of user buffers; arithmetic is always fp32.
enum class ElemType : uint8_t { kF32 = 0, kF16 = 1, kBf16 = 2 };
size_t elem_size(ElemType t);

// The codecs, families and facts of kernels/codecs.def (the one table: read it for what each
// column means).
enum class CodecFamily : uint8_t { kLinear, kCasq, kS2, kSparse };

enum class CodecId : uint8_t {
#define SCCL_CODEC(id, ...) id,
#include "kernels/codecs.def"
#undef SCCL_CODEC
};

struct CodecInfo {
  CodecId id;
  const char* name;
  CodecFamily family;
  uint32_t bits;
  ElemType wire;
  bool lossy;
  bool lossy_step;
  CodecId safer;
  bool dense;
  bool rotated;
};

// By CodecId, visible at compile time, so that names meant to denote a codec (the configuration
// table's) are checked with static_assert.
// clang-format off
inline constexpr CodecInfo kCodecs[] = {
#define SCCL_CODEC(id, name, family, bits, wire, lossy, lossy_step, safer, dense, rotated) \
  {CodecId::id, name, CodecFamily::k##family, bits, ElemType::k##wire, lossy != 0, \
   lossy_step != 0, CodecId::safer, dense != 0, rotated != 0},
#include "kernels/codecs.def"
#undef SCCL_CODEC
};
// clang-format on
inline constexpr int kNumCodecs = sizeof(kCodecs) / sizeof(kCodecs[0]);

constexpr bool codecs_in_id_order() {
  for (int i = 0; i < kNumCodecs; ++i) {
    if (int(kCodecs[i].id) != i) return false;
  }
  return true;
}
static_assert(codecs_in_id_order(), "codecs.def: rows in CodecId order from 0");

constexpr bool codec_facts_consistent() {
  for (const CodecInfo& c : kCodecs) {
    if (c.lossy_step && !c.lossy) return false;     // a lossy step makes a lossy codec
    if (!c.lossy && c.safer != c.id) return false;  // an exact codec is the top rung
    if (c.lossy && c.safer == c.id) return false;   // a lossy one has a safer codec
    if ((c.wire != ElemType::kF32) && (c.family != CodecFamily::kLinear || c.bits != 0))
      return false;  // only casts put another element type on the wire
    if (c.rotated && (c.family != CodecFamily::kLinear || c.bits == 0))
      return false;  // only the blockwise quantizers rotate
  }
  return true;
}
static_assert(codec_facts_consistent(), "codecs.def: inconsistent facts");

// The facts of a codec; an id outside the table (a corrupt packet's byte) has none.
constexpr const CodecInfo* codec_info(CodecId id) {
  return int(id) < kNumCodecs ? &kCodecs[int(id)] : nullptr;
}

constexpr bool is_codec_name(std::string_view name) {
  for (const CodecInfo& c : kCodecs) {
    if (name == c.name) return true;
  }
  return false;
}

// "q8" -> kQ8; false for unknown names ("auto" is decided above, in coll).
bool codec_from_name(const char* name, CodecId* out);
const char* codec_name(CodecId id);

// Everything that shapes a packet or its randomness. The engine fills it identically on every
// rank for a given (buffer, call, slice, step), so packets are identical bit for bit.
struct CodecParams {
  CodecId codec = CodecId::kNone;
  uint64_t seed = 0;          // SKETCHCCL_SEED
  uint64_t call = 0;          // per-buffer call counter, agreed across ranks
  uint32_t offset_key = 0;    // where the slice lies in the buffer (the engine: its offset, folded)
  uint32_t step = 0;          // ring step that produces the packet (encode: 0)
  uint32_t s2_rows = 3;       // SKETCHCCL_S2_ROWS
  uint32_t s2_counters = 0;   // s2 counters per row for this slice (the engine's budget decision)
  bool casq_nearest = false;  // CASQ rounds to the nearest level (the engine: error feedback on)
};

// What decode learned; s2 fills the peeling figures.
struct DecodeStats {
  uint64_t nonzeros = 0;   // set bits of the merged bitmap (s2), else non-zero outputs
  uint64_t peeled = 0;     // s2 positions recovered exactly by peeling
  uint64_t estimated = 0;  // s2 positions left to the median estimate
  // In, optional: host memory of bitmap_words(n) 64-bit words. An s2 decode overwrites it with
  // the positions left to the median estimate outside non-finite blocks (the engine repairs
  // them exactly, coll/s2_repair.h); other codecs leave it alone. Decode keeps the pointer.
  uint64_t* unresolved = nullptr;
  // The figures alone, the pointer kept (a device copy of the struct holds no valid pointer).
  void set_counts(const DecodeStats& o) {
    nonzeros = o.nonzeros;
    peeled = o.peeled;
    estimated = o.estimated;
  }
};

// Exact size in bytes of a packet for n elements (fixed for given params and n).
size_t packet_bytes(const CodecParams& p, size_t n);

// Compresses the local slice x[n] into pkt (cap bytes, at least packet_bytes).
Status encode(const CodecParams& p, const void* x, ElemType t, size_t n, void* pkt, size_t cap);

// The fused ring step: out = packet of (everything in `in`) + x[n]. `in` is validated first
// (header, count, parameters, size); a mismatch is an error, never an out-of-bounds read.
Status step(const CodecParams& p, const void* in, size_t in_bytes, const void* x, ElemType t,
            size_t n, void* out, size_t cap);

// y[n] = decoded values times `scale` (1/P for ncclAvg, else 1). Validates like step.
Status decode(const CodecParams& p, const void* pkt, size_t pkt_bytes, void* y, ElemType t,
              size_t n, float scale, DecodeStats* stats);

// The s2 budget helpers for the engine, from agreed numbers only. Both return counters PER ROW for
// CodecParams::s2_counters, at least kS2MinCounters and at most 2^30.
constexpr uint32_t kS2MinCounters = 16;
// First call on a buffer: `budget` (SKETCHCCL_S2_BUDGET) counters, all rows, per slice element.
uint32_t s2_counters_for_budget(size_t n, uint32_t rows, double budget);
// Later calls: `per_nonzero` (SKETCHCCL_S2_COUNTERS_PER_NZ) counters, all rows, per non-zero
// of the previous call's union support (DecodeStats::nonzeros of that slice).
uint32_t s2_counters_for_support(uint64_t support, uint32_t rows, double per_nonzero);

}  // namespace sketchccl::kernels
