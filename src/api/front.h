// The NCCL API behind the exports: one virtual per function of nccl_api.def, named after it,
// and one entry point for every collective and point-to-point call (a CollCall). Two fronts
// implement it: src/interpose/ in front of a real NCCL (forwards unless it takes a call over),
// src/standalone/ without one (runs the calls itself). Each starts from a default for every
// function (forward, or refuse) and writes only what it does differently.
#pragma once

#include "src/api/coll_call.h"
#include "src/api/nccl_api.h"

namespace sketchccl::api {

class Front {
 public:
  virtual ~Front() = default;

#define SCCL_NCCL_FN(name, since, params, args) virtual ncclResult_t name params = 0;
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) virtual ret name params = 0;
#define SCCL_NCCL_VOID(name, since, params, args) virtual void name params = 0;
#include "src/api/nccl_api.def"

  // Every row SCCL_NCCL_COLL of nccl_api.def, as the export described it.
  virtual ncclResult_t collective(const CollCall& call) = 0;
};

}  // namespace sketchccl::api
