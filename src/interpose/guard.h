// The exception guard of the exported functions: nothing thrown inside SketchCCL reaches the
// caller's C code.
#pragma once

#include <nccl.h>

#include <new>

#include "src/core/status.h"
#include "src/interpose/last_error.h"

namespace sketchccl::interpose {

// Runs `body` (returning ncclResult_t); an exception becomes an error reported for `api`.
template <typename Body>
ncclResult_t guarded(const char* api, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return report(Status(Code::kSystemError, "out of memory"), api);
  } catch (...) {
    return report(Status(Code::kInternalError, "unexpected exception"), api);
  }
}

// The same for the functions that return text (ncclGetErrorString, ncclGetLastError).
template <typename Body>
const char* guarded_text(Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return "SketchCCL: unexpected exception";
  }
}

}  // namespace sketchccl::interpose
