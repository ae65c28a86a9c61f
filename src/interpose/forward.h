// Calling the real NCCL's twin of an exported function with the caller's arguments, bit for bit,
// and giving its result back unchanged.
#pragma once

#include <nccl.h>

#include <string>
#include <utility>

#include "src/api/last_error.h"

namespace sketchccl::interpose {

// The real library lacks `api`: ncclInvalidUsage when it predates the release that added it
// (`since`, an NCCL_VERSION_CODE; ncclGetLastError names both versions), else ncclInternalError
// (a broken or foreign libnccl).
ncclResult_t missing_real(const char* api, int since = 0);
// "2.29.7" for 22907.
std::string nccl_version_text(int code);

// Hands the call to `fn` (a RealApi pointer) unchanged and returns its result; `api` names the
// function when the real library lacks it. A failure makes ncclGetLastError the real one's.
template <typename... Params, typename... Args>
ncclResult_t forward(ncclResult_t (*fn)(Params...), const char* api, Args&&... args) {
  if (fn == nullptr) return missing_real(api);
  return api::forwarded(fn(std::forward<Args>(args)...));
}

}  // namespace sketchccl::interpose
