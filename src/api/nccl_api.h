// The NCCL API as SketchCCL exports it (nccl_api.def): nccl.h, the types of what an older nccl.h
// lacks (nccl_compat.h), the 2.28 device API's host functions when the nccl.h built against has
// them (nccl_device/), every ncclX and pncclX declared (nccl.h declares only its own ncclX), and
// the helpers the generators of nccl_api.def use.
#pragma once

#include <nccl.h>

#include "sketchccl_build_config.h"
#include "src/api/nccl_compat.h"

#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

// Every function and its twin, with the row's own signature: a row that differs from the header
// is a conflicting declaration, so the list cannot drift from nccl.h; a function the header
// predates is declared here (callers built against an older nccl.h include this file).
#define SCCL_NCCL_FN(name, since, params, args) \
  extern "C" ncclResult_t name params;          \
  extern "C" ncclResult_t p##name params;
#define SCCL_NCCL_COLL(name, kind, since, params, call, real) SCCL_NCCL_FN(name, since, params, ())
#define SCCL_NCCL_COLL_CONFIG(name, kind, since, params, call, real) \
  SCCL_NCCL_FN(name, since, params, ())
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) \
  extern "C" ret name params;                                   \
  extern "C" ret p##name params;
#define SCCL_NCCL_VOID(name, since, params, args) \
  extern "C" void name params;                    \
  extern "C" void p##name params;
#define SCCL_NCCL_VOID_NO_TWIN(name, since, params, args) extern "C" void name params;
#include "src/api/nccl_api.def"

// A parenthesised list without its parentheses: SCCL_ARGS (a, b) is a, b.
#define SCCL_ARGS(...) __VA_ARGS__

namespace sketchccl::api {

#if SKETCHCCL_NCCL_DEVICE_API
// What the team functions return when they fail: a team of no ranks, of which no rank is part.
inline constexpr ncclTeam_t kNoTeam = {0, -1, 0};
#endif

// Uses every argument of a generated body that has no use for them: ignore args;
template <typename... T>
void ignore(const T&... /*args*/) {}

}  // namespace sketchccl::api
