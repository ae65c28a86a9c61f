// The standalone front's default for every function of nccl_api.def: refused, with
// ncclInvalidUsage (a function without a result code: its row's failure value) and the reason in
// ncclGetLastError; a function that returns nothing does nothing. StandaloneFront (front.h)
// implements the rest.
#pragma once

#include "src/api/front.h"

namespace sketchccl::standalone {

// `api` is not implemented without a real NCCL: ncclInvalidUsage, the reason in ncclGetLastError.
ncclResult_t not_in_standalone(const char* api);

class RefusingFront : public api::Front {
 public:
#define SCCL_NCCL_FN(name, since, params, args) ncclResult_t name params override;
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) ret name params override;
#define SCCL_NCCL_VOID(name, since, params, args) void name params override;
#include "src/api/nccl_api.def"

  ncclResult_t collective(const api::CollCall& call) override;
};

}  // namespace sketchccl::standalone
