// AllReduce and ReduceScatter in front of a real NCCL, one path for both: the policy decides,
// per call, whether SketchCCL takes it over (hierarchically on several nodes of several ranks,
// at ncclGroupEnd inside a group) or forwards it to the real NCCL unchanged.
#include "src/api/call_log.h"
#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/api/submit.h"
#include "src/api/validate.h"
#include "src/interpose/call_policy.h"
#include "src/interpose/front.h"
#include "src/interpose/hierarchy_run.h"

namespace sketchccl::interpose {

ncclResult_t InterposedFront::collective(const api::CollCall& call) {
  if (api::compressible(call.kind)) return take_over(call);
  return ForwardingFront::collective(call);
}

ncclResult_t InterposedFront::take_over(api::CollCall call) {
  api::Runtime& rt = api::Runtime::get();
  auto c = rt.find(call.comm);
  // The first call after init may wait here, bounded, for the communicator's join.
  const CommState state = wait_for_join(c.get(), rt.settings().timeout_s);
  PolicyInput in = policy_input(c.get(), state, call);
  PolicyDecision d = decide(in);
  if (d.needs_memory) {
    call.mem = api::classify(call, c->nranks());  // for the policy and the run
    d = decide_with_memory(in, call.mem);
  }
  const bool logging = api::call_log_enabled();
  const int nranks = c != nullptr ? c->nranks() : 0;
  auto log = [&](const std::string& outcome) {
    if (logging) api::log_call(call, nranks, outcome.c_str(), real_.ncclCommCount);
  };
  if (!d.take_over) {
    log(forwarded_outcome(d, call.mem));
    if (c != nullptr) c->count_forwarded();
    return forward_call(call);
  }
  Status st = api::validate(call, c->rank(), c->nranks(), &call.elem);
  if (!st.ok()) {
    log("refused: invalid arguments");
    return api::report(st, call.api);
  }
  if (!c->device_path_usable(call.mem.type)) {
    // The gate or the CUDA backend could not be built (WARNed once): NCCL runs the call.
    log("forwarded: SketchCCL's device path could not be built");
    c->count_forwarded();
    return forward_call(call);
  }
  if (takes_nccl_phases(*c, call)) {
    log(taken_over_outcome() + ", hierarchical (NCCL's intra-node phases)");
    return run_nccl_phases(real_, *c, call);
  }
  if (api::group::active()) {
    // Launched at the outermost ncclGroupEnd, as NCCL launches its own; a simulated group hands
    // it to the real NCCL instead, whose simulation counts it (and nothing runs).
    log(taken_over_outcome() + ", launched at ncclGroupEnd");
    api::group::defer_call({[c, call] { return api::submit(*c, call, api::EngineRun::kCodec); },
                            [this, c, call] {
                              c->count_forwarded();
                              return forward_call(call);
                            }});
    return ncclSuccess;
  }
  log(taken_over_outcome());
  return api::report(api::submit(*c, call, api::EngineRun::kCodec), call.api);
}

}  // namespace sketchccl::interpose
