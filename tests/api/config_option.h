// SketchCCL's per-call options in an nccl*Config call's `ext` list (src/api/coll_config.h), as
// the workers of the Config calls build them.
#pragma once

#include <nccl.h>

#include "src/api/coll_config.h"

namespace sketchccl::testing {

// Option `id` (kOption*) under SketchCCL's vendor id; its value is the caller's to set.
inline ncclConfigExt_t sketchccl_option(int id) {
  ncclConfigExt_t e{};
  e.key.vendorId = sketchccl::api::kSketchcclVendorId;
  e.key.optionId = id;
  return e;
}

}  // namespace sketchccl::testing
