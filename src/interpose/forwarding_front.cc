#include "src/interpose/forwarding_front.h"

#include "src/api/call_log.h"
#include "src/api/runtime.h"
#include "src/interpose/forward.h"
#include "src/interpose/real_nccl.h"

namespace sketchccl::interpose {

#define SCCL_NCCL_FN(name, params, args)                   \
  ncclResult_t ForwardingFront::name params {              \
    if (real_.name == nullptr) return missing_real(#name); \
    return api::forwarded(real_.name args);                \
  }
#define SCCL_NCCL_VALUE(ret, name, params, args, failed) \
  ret ForwardingFront::name params {                     \
    if (real_.name == nullptr) {                         \
      (void)missing_real(#name);                         \
      return failed;                                     \
    }                                                    \
    return real_.name args;                              \
  }
// Nothing to report a missing one in: it does nothing.
#define SCCL_NCCL_VOID(name, params, args)      \
  void ForwardingFront::name params {           \
    if (real_.name != nullptr) real_.name args; \
  }
#include "src/api/nccl_api.def"

ncclResult_t ForwardingFront::collective(const api::CollCall& call) {
  auto c = api::Runtime::get().find(call.comm);
  if (c != nullptr) c->count_forwarded();
  if (api::call_log_enabled()) {
    api::log_call(call, c != nullptr ? c->nranks() : 0,
                  "forwarded: SketchCCL takes over AllReduce and ReduceScatter only",
                  real_.ncclCommCount);
  }
  return forward_call(call);
}

ncclResult_t ForwardingFront::forward_call(const api::CollCall& c) const {
  switch (c.kind) {
#define SCCL_NCCL_COLL(name, kind, params, call, real)     \
  case api::CollKind::k##kind:                             \
    if (real_.name == nullptr) return missing_real(#name); \
    return api::forwarded(real_.name real);
#include "src/api/nccl_api.def"
  }
  return missing_real(c.api);
}

ncclResult_t missing_real(const char* api) {
  return api::report(errorf(Code::kInternalError, "the real NCCL (%s) has no p%s",
                            loaded_nccl().path.c_str(), api),
                     api);
}

}  // namespace sketchccl::interpose
