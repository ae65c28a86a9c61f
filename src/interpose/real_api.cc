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
void* lookup(void* handle, const char* symbol) {
  void* fn = dlsym(handle, symbol);
  Dl_info info{};
  if (fn != nullptr && dladdr(fn, &info) != 0 && info.dli_fbase == own_object()) fn = nullptr;
  return fn;
}

// `symbol` (pncclX), else the plain ncclX when the library has no twin of it.
template <typename Fn>
void bind(void* handle, const char* symbol, Fn* slot) {
  void* fn = lookup(handle, symbol);
  if (fn == nullptr && symbol[0] == 'p') fn = lookup(handle, symbol + 1);
  *slot = reinterpret_cast<Fn>(fn);
}

}  // namespace

RealApi resolve_real_api(void* handle) {
  RealApi api;
  if (handle == nullptr) return api;
    // The twin pncclX, never ncclX: NCCL's own calls through its PLT reach SketchCCL's ncclX.
#define SCCL_NCCL_FN(name, since, params, args) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_COLL(name, kind, since, params, call, real) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real) \
  bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VOID(name, since, params, args) bind(handle, "p" #name, &api.name);
#define SCCL_NCCL_VOID_NO_TWIN(name, since, params, args) bind(handle, #name, &api.name);
#include "src/api/nccl_api.def"
  return api;
}

}  // namespace sketchccl::interpose
