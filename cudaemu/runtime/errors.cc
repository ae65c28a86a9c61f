// Errors: the per-thread last error, the sticky error of a faulted context, error strings.
#include <cstdio>

#include "cudaemu/runtime/state.h"
#include "cudaemu/work.h"

namespace cudaemu {
namespace {
thread_local cudaError_t t_last = cudaSuccess;
thread_local bool t_in_host_function = false;
std::atomic<int> g_sticky{cudaSuccess};
}  // namespace

cudaError_t sticky_error() {
  return static_cast<cudaError_t>(g_sticky.load(std::memory_order_acquire));
}
void set_sticky(cudaError_t e) {
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, e);
  progress().notify_all();
}
bool in_host_function() {
  return t_in_host_function;
}
void set_in_host_function(bool on) {
  t_in_host_function = on;
}

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

cudaError_t api_enter(const char* call) {
  releaser_check(call);
  // A host function must not call CUDA (cudaLaunchHostFunc); CUDA refuses it.
  if (t_in_host_function) return ret(cudaErrorNotPermitted);
  init();
  const cudaError_t s = sticky_error();
  if (s != cudaSuccess) return ret(s);
  return cudaSuccess;
}

void set_last_error(cudaError_t error) {
  ret(error);
}

}  // namespace cudaemu

using cudaemu::ret;

extern "C" {

cudaError_t cudaGetLastError() {
  cudaemu::releaser_check("cudaGetLastError");
  const cudaError_t sticky = cudaemu::sticky_error();
  const cudaError_t e = cudaemu::t_last;
  // A sticky error stays: the context is unusable until the process ends.
  cudaemu::t_last = sticky != cudaSuccess ? sticky : cudaSuccess;
  return e != cudaSuccess ? e : sticky;
}

cudaError_t cudaPeekAtLastError() {
  cudaemu::releaser_check("cudaPeekAtLastError");
  const cudaError_t sticky = cudaemu::sticky_error();
  return cudaemu::t_last != cudaSuccess ? cudaemu::t_last : sticky;
}

const char* cudaGetErrorName(cudaError_t e) {
  cudaemu::releaser_check("cudaGetErrorName");
  switch (e) {
#define CUDAEMU_ERR(name, text) \
  case name:                    \
    return #name;
#include "cudaemu/runtime/error_list.inc"
#undef CUDAEMU_ERR
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  cudaemu::releaser_check("cudaGetErrorString");
  switch (e) {
#define CUDAEMU_ERR(name, text) \
  case name:                    \
    return text;
#include "cudaemu/runtime/error_list.inc"
#undef CUDAEMU_ERR
    default:
      return "unrecognized error code";
  }
}

}  // extern "C"
