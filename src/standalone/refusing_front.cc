#include "src/standalone/refusing_front.h"

#include "src/api/last_error.h"

namespace sketchccl::standalone {

ncclResult_t not_in_standalone(const char* api) {
  return api::report(errorf(Code::kInvalidUsage,
                            "%s is not implemented in standalone mode (SKETCHCCL_NCCL_LIB=none or "
                            "no real NCCL found): it needs the real NCCL",
                            api),
                     api);
}

#define SCCL_NCCL_FN(name, since, params, args)    \
  ncclResult_t RefusingFront::name params { \
    api::ignore args;                       \
    return not_in_standalone(#name);        \
  }
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) \
  ret RefusingFront::name params {                       \
    api::ignore args;                                    \
    (void)not_in_standalone(#name);                      \
    return failed;                                       \
  }
// Nothing to refuse with: SketchCCL has nothing of NCCL's to reset or report.
#define SCCL_NCCL_VOID(name, since, params, args) \
  void RefusingFront::name params {        \
    api::ignore args;                      \
  }
#include "src/api/nccl_api.def"

ncclResult_t RefusingFront::collective(const api::CollCall& call) {
  return not_in_standalone(call.api);
}

}  // namespace sketchccl::standalone
