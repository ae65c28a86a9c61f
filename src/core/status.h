// Status: an error code plus a message, returned by every fallible internal function.
#pragma once

#include <string>
#include <utility>

namespace sketchccl {

// Values mirror ncclResult_t so the exported boundary converts with a cast.
enum class Code : int {
  kOk = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", for logs and tools.
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// printf-style constructor for error statuses.
Status errorf(Code code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace sketchccl

// Propagates a non-ok Status to the caller.
#define SCCL_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::sketchccl::Status sccl_status_ = (expr);   \
    if (!sccl_status_.ok()) return sccl_status_; \
  } while (0)
