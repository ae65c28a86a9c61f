// The exported NCCL API, every row of nccl_api.def: pncclX is the definition and ncclX an alias
// of it, both visible, as the real libnccl.so.2 exports them (a row without a twin: its plain
// name only). Each body runs behind the exception guard and hands the caller's arguments,
// untouched, to the front of this process; a collective's arguments become one CollCall here.
#include "src/api/coll_call.h"
#include "src/api/exports/choose_front.h"
#include "src/api/guard.h"
#include "src/api/nccl_api.h"

// NOLINTBEGIN: the exported C functions below.
using sketchccl::api::CollKind;
using sketchccl::api::front;
using sketchccl::api::guarded;
using sketchccl::api::guarded_value;
using sketchccl::api::guarded_void;
using sketchccl::api::make_call;
using sketchccl::api::make_config_call;

#define SCCL_EXPORT extern "C" __attribute__((visibility("default")))
#define SCCL_ALIAS(ret, name, params) \
  extern "C" __attribute__((visibility("default"), alias("p" #name))) ret name params;

#define SCCL_NCCL_FN(name, since, params, args)               \
  SCCL_EXPORT ncclResult_t p##name params {                   \
    return guarded(#name, [&] { return front().name args; }); \
  }                                                           \
  SCCL_ALIAS(ncclResult_t, name, params)
#define SCCL_NCCL_COLL(name, kind, since, params, call, real)                 \
  SCCL_EXPORT ncclResult_t p##name params {                                   \
    return guarded(#name, [&] {                                               \
      return front().collective(                                              \
          make_call(CollKind::k##kind, #name, SCCL_ARGS call, comm, stream)); \
    });                                                                       \
  }                                                                           \
  SCCL_ALIAS(ncclResult_t, name, params)
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real)                         \
  SCCL_EXPORT ncclResult_t p##name params {                                                  \
    return guarded(#name, [&] {                                                              \
      return front().collective(                                                             \
          make_config_call(CollKind::k##kind, #name, SCCL_ARGS call, comm, stream, config)); \
    });                                                                                      \
  }                                                                                          \
  SCCL_ALIAS(ncclResult_t, name, params)
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed)                  \
  SCCL_EXPORT ret p##name params {                                               \
    return guarded_value<ret>(#name, failed, [&] { return front().name args; }); \
  }                                                                              \
  SCCL_ALIAS(ret, name, params)
#define SCCL_NCCL_VOID(name, since, params, args)    \
  SCCL_EXPORT void p##name params {                  \
    guarded_void(#name, [&] { front().name args; }); \
  }                                                  \
  SCCL_ALIAS(void, name, params)
#define SCCL_NCCL_VOID_NO_TWIN(name, since, params, args) \
  SCCL_EXPORT void name params {                          \
    guarded_void(#name, [&] { front().name args; });      \
  }
#include "src/api/nccl_api.def"
// NOLINTEND
