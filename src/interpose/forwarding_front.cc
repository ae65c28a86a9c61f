#include "src/interpose/forwarding_front.h"

#include "src/api/call_log.h"
#include "src/api/runtime.h"
#include "src/interpose/forward.h"
#include "src/interpose/real_nccl.h"

namespace sketchccl::interpose {

#define SCCL_NCCL_FN(name, since, params, args)                   \
  ncclResult_t ForwardingFront::name params {                     \
    if (real_.name == nullptr) return missing_real(#name, since); \
    return api::forwarded(real_.name args);                       \
  }
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) \
  ret ForwardingFront::name params {                            \
    if (real_.name == nullptr) {                                \
      (void)missing_real(#name, since);                         \
      return failed;                                            \
    }                                                           \
    return real_.name args;                                     \
  }
// Nothing to report a missing one in: it does nothing.
#define SCCL_NCCL_VOID(name, since, params, args) \
  void ForwardingFront::name params {             \
    if (real_.name != nullptr) real_.name args;   \
  }
#include "src/api/nccl_api.def"

ncclResult_t ForwardingFront::collective(const api::CollCall& call) {
  return forward_logged(call, "forwarded: SketchCCL takes over AllReduce and ReduceScatter only");
}

ncclResult_t ForwardingFront::forward_logged(const api::CollCall& call,
                                             const std::string& outcome) {
  auto c = api::Runtime::get().find(call.comm);
  if (api::call_log_enabled()) {
    api::log_call(call, c != nullptr ? c->nranks() : 0, outcome.c_str(), real_.ncclCommCount);
  }
  return forward_counted(c.get(), call);
}

bool ForwardingFront::has_real(const api::CollCall& c) const {
  if (c.with_config) {
    switch (c.kind) {
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real) \
  case api::CollKind::k##kind:                                       \
    return real_.name != nullptr;
#include "src/api/nccl_api.def"
      default:
        return false;
    }
  }
  switch (c.kind) {
#define SCCL_NCCL_COLL(name, kind, since, params, call, real) \
  case api::CollKind::k##kind:                                \
    return real_.name != nullptr;
#include "src/api/nccl_api.def"
  }
  return false;
}

ncclResult_t forward_call(const RealApi& nccl, const api::CollCall& c) {
  if (c.with_config) {
    switch (c.kind) {
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real) \
  case api::CollKind::k##kind:                                       \
    if (nccl.name == nullptr) return missing_real(#name, since);     \
    return api::forwarded(nccl.name real);
#include "src/api/nccl_api.def"
      default:
        return missing_real(c.api);
    }
  }
  switch (c.kind) {
#define SCCL_NCCL_COLL(name, kind, since, params, call, real)    \
  case api::CollKind::k##kind:                                   \
    if (nccl.name == nullptr) return missing_real(#name, since); \
    return api::forwarded(nccl.name real);
#include "src/api/nccl_api.def"
  }
  return missing_real(c.api);
}

ncclResult_t forward_counted(const RealApi& nccl, coll::Communicator* comm,
                             const api::CollCall& call) {
  if (comm != nullptr) comm->count_forwarded();
  return forward_call(nccl, call);
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z since.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." +
         std::to_string(rest % 100);
}

ncclResult_t missing_real(const char* api, int since) {
  const RealNccl& real = loaded_nccl();
  if (since > real.version) {
    return api::report(
        errorf(Code::kInvalidUsage,
               "%s needs NCCL %s or newer; the NCCL in use (%s) is %s and does not have it", api,
               nccl_version_text(since).c_str(), real.path.c_str(),
               nccl_version_text(real.version).c_str()),
        api);
  }
  return api::report(errorf(Code::kInternalError, "the real NCCL (%s, %s) has no p%s",
                            real.path.c_str(), nccl_version_text(real.version).c_str(), api),
                     api);
}

}  // namespace sketchccl::interpose
