// The exception guard of the exported functions: nothing thrown inside SketchCCL reaches the
// caller's C code. An exception is reported for the function that caught it (ncclGetLastError).
#pragma once

#include <nccl.h>

#include <new>

#include "src/api/last_error.h"
#include "src/core/status.h"

namespace sketchccl::api {

// The result code of an exception, reported for `api`.
inline ncclResult_t caught(const char* api) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return report(Status(Code::kSystemError, "out of memory"), api);
  } catch (...) {
    return report(Status(Code::kInternalError, "unexpected exception"), api);
  }
}

// Runs `body` (returning ncclResult_t).
template <typename Body>
ncclResult_t guarded(const char* api, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return caught(api);
  }
}

// Runs `body` of a function that returns a value, not a result code: `failed` on an exception.
template <typename T, typename Body>
T guarded_value(const char* api, T failed, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    (void)caught(api);
    return failed;
  }
}

// Runs `body` of a function that returns nothing.
template <typename Body>
void guarded_void(const char* api, Body&& body) noexcept {
  try {
    body();
  } catch (...) {
    (void)caught(api);
  }
}

}  // namespace sketchccl::api
