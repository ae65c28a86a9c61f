#include "src/core/status.h"

#include <cstdarg>
#include <cstdio>

namespace sketchccl {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "success";
    case Code::kUnhandledCudaError:
      return "unhandled cuda error";
    case Code::kSystemError:
      return "system error";
    case Code::kInternalError:
      return "internal error";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kInvalidUsage:
      return "invalid usage";
    case Code::kRemoteError:
      return "remote error";
    case Code::kInProgress:
      return "in progress";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (ok()) return "success";
  return std::string(code_name(code_)) + ": " + message_;
}

Status errorf(Code code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

}  // namespace sketchccl
