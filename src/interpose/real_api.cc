#include "src/interpose/real_api.h"

#include <dlfcn.h>

namespace sketchccl::interpose {
namespace {

// The object SketchCCL itself is loaded from.
const void* own_object() {
  static const void* base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&own_object), &info) != 0 ? info.dli_fbase : nullptr;
  }();
  return base;
}

// `symbol` of `handle`, unless it resolves to SketchCCL's own export (a handle whose lookup
// scope holds SketchCCL, such as the program's when NCCL is linked into it): calling that would
// loop back here.
template <typename Fn>
void bind(void* handle, const char* symbol, Fn* slot) {
  void* fn = dlsym(handle, symbol);
  Dl_info info{};
  if (fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fbase == own_object()) fn = nullptr;
  *slot = reinterpret_cast<Fn>(fn);
}

}  // namespace

RealApi resolve_real_api(void* handle) {
  RealApi api;
  if (handle == nullptr) return api;
    // The twin pncclX, never ncclX: NCCL's own calls through its PLT reach SketchCCL's ncclX.
#define SCCL_NCCL_FN(name, params, args) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_COLL(name, kind, params, call, real) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VALUE(ret, name, params, args, failed) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VOID(name, params, args) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VOID_NO_TWIN(name, params, args) bind(handle, #name, &api.name);
#include "src/api/nccl_api.def"
  return api;
}

}  // namespace sketchccl::interpose
