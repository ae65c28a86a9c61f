// The one conversion from SketchCCL's Code to ncclResult_t: a cast, valid because the values are
// the same (checked here, where nccl.h is visible; core does not see it).
#pragma once

#include <nccl.h>

#include "src/core/status.h"

namespace sketchccl::api {

static_assert(static_cast<int>(Code::kOk) == ncclSuccess);
static_assert(static_cast<int>(Code::kUnhandledCudaError) == ncclUnhandledCudaError);
static_assert(static_cast<int>(Code::kSystemError) == ncclSystemError);
static_assert(static_cast<int>(Code::kInternalError) == ncclInternalError);
static_assert(static_cast<int>(Code::kInvalidArgument) == ncclInvalidArgument);
static_assert(static_cast<int>(Code::kInvalidUsage) == ncclInvalidUsage);
static_assert(static_cast<int>(Code::kRemoteError) == ncclRemoteError);
static_assert(static_cast<int>(Code::kInProgress) == ncclInProgress);

inline ncclResult_t to_nccl(Code code) {
  return static_cast<ncclResult_t>(code);
}

}  // namespace sketchccl::api
