// The NCCL API as SketchCCL exports it (nccl_api.def): nccl.h, the 2.28 device API's host
// functions when the nccl.h built against has them (nccl_device/), every pncclX twin declared
// (nccl.h declares only its own), and the helpers the generators of nccl_api.def use.
#pragma once

#include <nccl.h>

#include "sketchccl_build_config.h"

#if SKETCHCCL_NCCL_DEVICE_API
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>
#endif

// Every function's twin, with the row's own signature: a row that differs from the header is a
// conflicting declaration, so the list cannot drift from nccl.h.
#define SCCL_NCCL_FN(name, params, args) extern "C" ncclResult_t p##name params;
#define SCCL_NCCL_COLL(name, kind, params, call, real) extern "C" ncclResult_t p##name params;
#define SCCL_NCCL_VALUE(ret, name, params, args, failed) extern "C" ret p##name params;
#define SCCL_NCCL_VOID(name, params, args) extern "C" void p##name params;
#define SCCL_NCCL_VOID_NO_TWIN(name, params, args) extern "C" void name params;
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
