// The interposed front's default for every function of nccl_api.def: the real twin with the
// caller's arguments, bit for bit, and its result unchanged; a collective is counted as
// forwarded in its communicator's statistics and logged (the per-call log) first.
// InterposedFront (front.h) overrides what SketchCCL adds or takes over.
#pragma once

#include <string>

#include "src/api/front.h"
#include "src/interpose/real_api.h"

namespace sketchccl::coll {
class Communicator;
}  // namespace sketchccl::coll

namespace sketchccl::interpose {

// The call to the real twin named by call.kind (and with_config), with the arguments the export
// received, its result unchanged.
ncclResult_t forward_call(const RealApi& nccl, const api::CollCall& call);
// forward_call, counted first as forwarded in `comm`'s statistics (null: SketchCCL has no side of
// the communicator): the one way out to NCCL for a collective SketchCCL was asked to run.
ncclResult_t forward_counted(const RealApi& nccl, coll::Communicator* comm,
                             const api::CollCall& call);

class ForwardingFront : public api::Front {
 public:
  explicit ForwardingFront(const RealApi& real) : real_(real) {}

#define SCCL_NCCL_FN(name, since, params, args) ncclResult_t name params override;
#define SCCL_NCCL_VALUE(ret, name, since, params, args, failed) ret name params override;
#define SCCL_NCCL_VOID(name, since, params, args) void name params override;
#include "src/api/nccl_api.def"

  ncclResult_t collective(const api::CollCall& call) override;

 protected:
  // The free functions above, on this front's real NCCL.
  ncclResult_t forward_call(const api::CollCall& call) const {
    return interpose::forward_call(real_, call);
  }
  ncclResult_t forward_counted(coll::Communicator* comm, const api::CollCall& call) const {
    return interpose::forward_counted(real_, comm, call);
  }
  // Whether the real NCCL has that twin.
  bool has_real(const api::CollCall& call) const;
  // forward_call, counted as forwarded in the communicator's statistics and logged with
  // `outcome` (the per-call log) first.
  ncclResult_t forward_logged(const api::CollCall& call, const std::string& outcome);

  const RealApi& real_;  // resolved once at load
};

}  // namespace sketchccl::interpose
