// Calling the real NCCL's twin of an exported function with the caller's arguments, bit for bit.
#pragma once

#include <nccl.h>

#include <utility>

#include "src/interpose/last_error.h"

namespace sketchccl::interpose {

// Hands the call to `fn` (a RealApi pointer) unchanged and returns its result; `api` names the
// function when the real library lacks it.
template <typename... Params, typename... Args>
ncclResult_t forward(ncclResult_t (*fn)(Params...), const char* api, Args&&... args) {
  if (fn == nullptr) return missing_real(api);
  return forwarded(fn(std::forward<Args>(args)...));
}

}  // namespace sketchccl::interpose
