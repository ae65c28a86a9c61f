// The interposed front's default for every function of nccl_api.def: the real twin with the
// caller's arguments, bit for bit, and its result unchanged; a collective is counted as
// forwarded in its communicator's statistics and logged (the per-call log) first.
// InterposedFront (front.h) overrides what SketchCCL adds or takes over.
#pragma once

#include <string>

#include "src/api/front.h"
#include "src/interpose/real_api.h"

namespace sketchccl::interpose {

class ForwardingFront : public api::Front {
 public:
  explicit ForwardingFront(const RealApi& real) : real_(real) {}

#define SCCL_NCCL_FN(name, since, params, args) ncclResult_t name params override;
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) ret name params override;
#define SCCL_NCCL_VOID(name, since, params, args) void name params override;
#include "src/api/nccl_api.def"

  ncclResult_t collective(const api::CollCall& call) override;

 protected:
  // The call to the real twin named by call.kind (and with_config), with the arguments the
  // export received.
  ncclResult_t forward_call(const api::CollCall& call) const;
  // Whether the real NCCL has that twin.
  bool has_real(const api::CollCall& call) const;
  // forward_call, counted as forwarded in the communicator's statistics and logged with
  // `outcome` (the per-call log) first.
  ncclResult_t forward_logged(const api::CollCall& call, const std::string& outcome);

  const RealApi& real_;  // resolved once at load
};

}  // namespace sketchccl::interpose
