// Errors at the exported boundary: the text of ncclGetLastError, whose it is (SketchCCL's or the
// real NCCL's), and the conversion of an internal Status to the caller's ncclResult_t.
#pragma once

#include <nccl.h>

#include <string>

#include "src/core/status.h"

namespace sketchccl::api {

// ncclGetLastError text: set by every failing call of SketchCCL's, on any thread, and from then
// on every thread's ncclGetLastError answers it (until a forwarded call fails).
void set_last_error(const std::string& text);
std::string last_error();
// The same, as the text ncclGetLastError returns (valid until this thread's next call).
const char* last_error_text();
// ncclGetErrorString's text for a result, as NCCL words it (when no real NCCL answers).
const char* error_string(ncclResult_t r);

// Converts an internal Status to ncclResult_t, recording the message for ncclGetLastError.
ncclResult_t report(const Status& st, const char* api);
// The result of a forwarded call, passed through; an error makes ncclGetLastError the real one's.
ncclResult_t forwarded(ncclResult_t r);
// Whether the last failure, on any thread, was SketchCCL's own (else the real NCCL's).
bool last_error_is_ours();

}  // namespace sketchccl::api
