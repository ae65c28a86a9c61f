#include "src/api/last_error.h"

#include <atomic>
#include <mutex>

#include "src/api/result.h"
#include "src/core/log.h"

namespace sketchccl::api {
namespace {

std::mutex g_error_mu;
// Whose the last failure is, process-wide as the text (and as NCCL's own last error): PyTorch's
// watchdog asks ncclGetLastError on another thread than the one that failed.
std::atomic<bool> g_last_error_ours{false};
std::string& g_last_error() {
  static std::string* s = new std::string();  // leaked: used by exit handlers
  return *s;
}

}  // namespace

void set_last_error(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_error_mu);
  g_last_error() = text;
  g_last_error_ours.store(true);
}

std::string last_error() {
  std::lock_guard<std::mutex> lock(g_error_mu);
  return g_last_error();
}

const char* last_error_text() {
  thread_local std::string text;
  text = last_error();
  return text.c_str();
}

const char* error_string(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

ncclResult_t forwarded(ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress) g_last_error_ours.store(false);
  return r;
}

bool last_error_is_ours() {
  return g_last_error_ours.load();
}

ncclResult_t report(const Status& st, const char* api) {
  if (!st.ok() && st.code() != Code::kInProgress) {
    std::string text = std::string(api) + ": " + st.message();
    set_last_error(text);
    SCCL_WARN(kLogColl, "%s", text.c_str());
  }
  return to_nccl(st.code());
}

}  // namespace sketchccl::api
