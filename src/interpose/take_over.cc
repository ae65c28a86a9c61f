// AllReduce, ReduceScatter and (with SKETCHCCL_ALLGATHER_CODEC) AllGather in front of a real
// NCCL, one path for all: the policy decides, per call, whether SketchCCL takes it over
// (hierarchically on several nodes of several ranks, at ncclGroupEnd inside a group) or forwards
// it to the real NCCL unchanged.
#include <mutex>
#include <set>

#include "src/api/call_log.h"
#include "src/api/coll_config.h"
#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/api/submit.h"
#include "src/api/validate.h"
#include "src/core/log.h"
#include "src/interpose/call_policy.h"
#include "src/interpose/front.h"
#include "src/interpose/hierarchy_run.h"

namespace sketchccl::interpose {
namespace {

// Communicators whose device path failed to set up: their device calls are forwarded.
std::mutex g_failed_mu;
std::set<ncclComm_t>& failed_device_paths() {
  static auto* s = new std::set<ncclComm_t>;  // outlives exit-time calls
  return *s;
}

// The codec a taken-over AllGather runs: the call's option, else SKETCHCCL_ALLGATHER_CODEC.
kernels::CodecId gather_codec(const api::CollCall& call) {
  return call.has_codec ? call.codec : api::Runtime::get().settings().allgather_codec;
}

// Runs a taken-over call on SketchCCL's own path: the compressed AllGather, or the reduction.
Status run_own(coll::Communicator& c, const api::CollCall& call, bool* started) {
  if (call.kind == api::CollKind::kAllGather) {
    return api::submit_gather(c, call, gather_codec(call), started);
  }
  return api::submit(c, call, api::EngineRun::kCodec, started);
}

}  // namespace

bool device_path_failed(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_failed_mu);
  return failed_device_paths().count(comm) != 0;
}

void mark_device_path_failed(ncclComm_t comm, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(g_failed_mu);
    if (!failed_device_paths().insert(comm).second) return;
  }
  SCCL_WARN(kLogColl,
            "communicator %p: the device path could not be set up (%s): its device-buffer calls "
            "are forwarded to NCCL uncompressed",
            static_cast<void*>(comm), why.to_string().c_str());
}

void forget_device_path(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_failed_mu);
  failed_device_paths().erase(comm);
}

ncclResult_t InterposedFront::collective(const api::CollCall& call) {
  if (call.with_config) return config_collective(call);
  if (api::compressible(call.kind)) return take_over(call);
  // The AllGather is compressed only where SKETCHCCL_ALLGATHER_CODEC asks (docs/allgather.md).
  if (call.kind == api::CollKind::kAllGather &&
      api::Runtime::get().settings().allgather_codec != kernels::CodecId::kNone)
    return take_over(call);
  return ForwardingFront::collective(call);
}

ncclResult_t InterposedFront::config_collective(api::CollCall call) {
  // A real NCCL older than 2.31 has no such call: refused alike whatever the policy would say.
  if (!has_real(call)) return forward_call(call);
  const bool gather = call.kind == api::CollKind::kAllGather;
  if (!api::compressible(call.kind) && !gather) return ForwardingFront::collective(call);
  const api::CollOptions opts = api::read_coll_config(call.config);
  // NCCL judges a config it cannot use itself, and runs what the caller pinned to its algorithms.
  if (!opts.invalid.empty()) return forward_logged(call, "forwarded: " + opts.invalid);
  if (!opts.needs_nccl.empty()) return forward_logged(call, "forwarded: " + opts.needs_nccl);
  if (opts.exact) return forward_logged(call, "forwarded: the call's config asks for exact");
  call.has_codec = opts.has_codec;
  call.codec = opts.codec;
  // An AllGather without a codec of its own or from SKETCHCCL_ALLGATHER_CODEC: NCCL's, as asked.
  if (gather && gather_codec(call) == kernels::CodecId::kNone) {
    return ForwardingFront::collective(call);
  }
  return take_over(call);
}

ncclResult_t InterposedFront::take_over(api::CollCall call) {
  api::Runtime& rt = api::Runtime::get();
  auto c = rt.find(call.comm);
  // Suspended (ncclCommSuspend): NCCL answers for it until the resume.
  if (c != nullptr && c->suspended()) {
    return forward_logged(call, "forwarded: the communicator is suspended");
  }
  // An AllGather's codec the compressed AllGather cannot run (a config's option): NCCL's.
  if (call.kind == api::CollKind::kAllGather && !coll::gather_codec_usable(gather_codec(call))) {
    return forward_logged(call, std::string("forwarded: codec ") +
                                    kernels::codec_name(gather_codec(call)) +
                                    " cannot run an AllGather");
  }
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
  // Every exit to NCCL from here: logged, counted, forwarded.
  auto forward_now = [&](const std::string& outcome) {
    log(outcome);
    return forward_counted(c.get(), call);
  };
  if (!d.take_over) {
    if (c != nullptr && d.why == ForwardReason::kNoGain) c->count_forwarded_no_gain();
    return forward_now(forwarded_outcome(d, call.mem));
  }
  Status st = api::validate(call, c->rank(), c->nranks(), &call.elem);
  if (!st.ok()) {
    log("refused: invalid arguments");
    return api::report(st, call.api);
  }
  if (!c->device_path_usable(call.mem.type)) {
    // The device staging could not be prepared (WARNed once): NCCL runs the call.
    return forward_now("forwarded: SketchCCL's device path could not be built");
  }
  // An earlier device call's setup failed on this communicator (WARNed once): NCCL runs it.
  if (call.mem.type == backend::MemoryType::kDevice && device_path_failed(call.comm)) {
    return forward_now("forwarded: the device path could not be set up on this communicator");
  }
  // A deferred call's fallback, where the group's end does not run it (a simulated group).
  auto forward_deferred = [this, &c, &call] {
    return [this, c, call] { return forward_counted(c.get(), call); };
  };
  if (takes_nccl_phases(*c, call)) {
    const size_t tail = nccl_phases_tail(*c, call);
    const bool grouped = api::group::active();
    log(taken_over_outcome(call) + ", hierarchical (NCCL's intra-node phases)" +
        (tail > 0 ? ", the last " + std::to_string(tail) + " elements by NCCL's AllReduce" : "") +
        (grouped ? ", launched at ncclGroupEnd" : ""));
    if (!grouped) return run_nccl_phases(real_, *c, call);
    api::group::defer_call({[this, c, call] {
                              const ncclResult_t r = run_nccl_phases(real_, *c, call);
                              if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
                              return Status(static_cast<Code>(r), api::last_error_text());
                            },
                            forward_deferred()});
    return ncclSuccess;
  }
  if (api::group::active()) {
    // Launched at the outermost ncclGroupEnd, as NCCL launches its own; a simulated group hands
    // it to the real NCCL instead, whose simulation counts it (and nothing runs).
    log(taken_over_outcome(call) + ", launched at ncclGroupEnd");
    api::group::defer_call(
        {[this, c, call] {
           bool started = false;
           Status run = run_own(*c, call, &started);
           if (run.ok() || started || call.mem.type != backend::MemoryType::kDevice) return run;
           // As below: nothing was enqueued, NCCL runs it.
           mark_device_path_failed(call.comm, run);
           const ncclResult_t r = forward_counted(c.get(), call);
           return r == ncclSuccess || r == ncclInProgress
                      ? Status::Ok()
                      : Status(Code::kInternalError, "the forwarded call failed");
         },
         forward_deferred()});
    return ncclSuccess;
  }
  log(taken_over_outcome(call));
  bool started = false;
  Status run = run_own(*c, call, &started);
  if (!run.ok() && !started && call.mem.type == backend::MemoryType::kDevice) {
    // Device buffers: a failure here is one of setting the call up (the staging memory, the
    // stream operations), before the proxy could run it: the call goes to NCCL, and so do this
    // communicator's later device calls. A call that started runs with the other ranks: its
    // error is reported (the communicator has failed).
    mark_device_path_failed(call.comm, run);
    return forward_counted(c.get(), call);
  }
  return api::report(run, call.api);
}

}  // namespace sketchccl::interpose
