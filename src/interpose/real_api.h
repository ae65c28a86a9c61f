// The real NCCL's functions, resolved once when the library is loaded: one typed pointer per row
// of nccl_api.def, named after the function and holding its twin pncclX (a row without a twin:
// the plain name; a library that lacks the twin but has the plain name, as NCCL 2.32 may for
// ncclSetEncryption: the plain name). A symbol the library lacks is null, and a call that needs
// it fails with missing_real (forward.h).
#pragma once

#include "src/api/nccl_api.h"

namespace sketchccl::interpose {

struct RealApi {
#define SCCL_NCCL_FN(name, since, params, args) ncclResult_t(*name) params = nullptr;
#define SCCL_NCCL_COLL(name, kind, since, params, call, real) ncclResult_t(*name) params = nullptr;
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real) \
  ncclResult_t(*name) params = nullptr;
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) ret(*name) params = nullptr;
#define SCCL_NCCL_VOID(name, since, params, args) void(*name) params = nullptr;
#include "src/api/nccl_api.def"
};

// Fills the table from a dlopen handle of the real library (all null for a null handle).
RealApi resolve_real_api(void* handle);

}  // namespace sketchccl::interpose
