// The per-call config of NCCL 2.31's nccl*Config collectives (ncclCollConfig_t), read as NCCL
// reads a config: only the caller's `size` bytes, and only after its size, magic and version
// check out; and SketchCCL's own per-call options in its `ext` list, under SketchCCL's vendor id
// (NCCL ignores the list). docs/interposition.md documents both.
#pragma once

#include <string>

#include "kernels/codec.h"
#include "src/api/nccl_compat.h"

namespace sketchccl::api {

// SketchCCL's vendor id in ncclConfigExt_t::key.vendorId: non-zero, below 2^24, as NCCL asks.
inline constexpr int kSketchcclVendorId = 0x5CC1C0;
// Its options (ncclConfigExt_t::key.optionId), each at most once per list.
enum SketchcclOption : int {
  kOptionCodec = 1,  // val.s: a codec name ("q8", "bf16", ...) for this call, instead of the
                     // configured one; every rank must pass the same
  kOptionExact = 2,  // val.i != 0: this call is not compressed (in front of NCCL: forwarded)
};

struct CollOptions {
  // The config is unusable (too small, wrong magic or version, a circular or repeating `ext`
  // list, an unknown option of SketchCCL's, an unknown codec): why. In front of NCCL the call is
  // forwarded unread (NCCL judges its own config); standalone it is ncclInvalidArgument.
  std::string invalid;
  // NCCL must run the call as the caller set it up: why (a forced algSelection, a CTA or CGA
  // setting, a launch completion event). Empty: SketchCCL may take it over.
  std::string needs_nccl;
  bool exact = false;
  bool has_codec = false;
  kernels::CodecId codec = kernels::CodecId::kNone;
};

// Reads `config` (NULL: the plain call, no options).
CollOptions read_coll_config(const ncclCollConfig_t* config);

}  // namespace sketchccl::api
