// AllReduce, groups and error queries in front of a real NCCL: the policy decides, per call,
// whether SketchCCL takes an AllReduce over; everything else is the real NCCL's.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "src/backend/cuda_query.h"
#include "src/core/config.h"
#include "src/core/log.h"
#include "src/interpose/allreduce_run.h"
#include "src/interpose/call_log.h"
#include "src/interpose/forward.h"
#include "src/interpose/group.h"
#include "src/interpose/hierarchy_run.h"
#include "src/interpose/interposed_front.h"
#include "src/interpose/interposed_policy.h"
#include "src/interpose/policy.h"
#include "src/interpose/runtime.h"

namespace sketchccl::interpose {

CommState comm_state(coll::Communicator* c, double timeout_s) {
  if (c == nullptr) return CommState::kNone;
  const auto& init = c->init_work();
  if (!init->done()) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!init->done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!init->done()) return CommState::kFailed;
  }
  if (!init->wait().ok() || c->stepped_aside()) return CommState::kFailed;
  if (!c->configs_agree()) return CommState::kDisagree;
  return CommState::kReady;
}

PolicyInput policy_input(const std::shared_ptr<coll::Communicator>& c, ncclRedOp_t op,
                         ncclDataType_t type, size_t count, cudaStream_t stream) {
  const Config& cfg = Config::global();
  PolicyInput in;
  in.enabled = cfg.get_bool(Var::kEnable);
  in.comm = comm_state(c.get(), cfg.get_double(Var::kTimeout));
  in.one_node = in.comm == CommState::kReady && c->forwards_one_node();
  in.op = op;
  in.type = type;
  in.count = count;
  in.min_bytes = cfg.get_size(Var::kMinBytes);
  in.mem_pending = true;  // asked only if the rest says "take over"
  if (in.comm == CommState::kReady && in.enabled) {
    in.capturing = backend::stream_is_capturing(stream);
    in.cuda_backend = backend::has_cuda_backend();
  }
  return in;
}

PolicyDecision decide_with_memory(PolicyInput& in, const BufferMemory& mem) {
  in.mem_pending = false;
  in.mem_known = mem.known;
  in.mem = mem.type;
  // Device buffers: the backend, a driver new enough and a usable hardware queue (docs/cuda.md).
  if (in.mem_known && in.mem == backend::MemoryType::kDevice && in.cuda_backend) {
    in.cuda_backend = backend::device_path_usable(&in.cuda_unusable);
  }
  PolicyDecision d = decide(in);
  if (d.why == ForwardReason::kMemory) {
    // DESIGN §13: any doubt forwards; said once per process, the per-call log says it each time.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      SCCL_WARN(kLogColl,
                "a buffer's memory cannot be classified (%s): such calls are forwarded to NCCL "
                "uncompressed (said once)",
                mem.why);
    }
  }
  return d;
}

std::string taken_over_outcome(bool exact) {
  const coll::Settings& s = Runtime::get().settings();
  if (exact) return "taken over, codec none";
  if (s.auto_codec) return "taken over, codec auto (the engine picks per buffer)";
  return std::string("taken over, codec ") + kernels::codec_name(s.codec);
}

std::string forwarded_outcome(const PolicyDecision& d, const BufferMemory& mem) {
  std::string out = std::string("forwarded: ") + d.reason;
  if (d.why == ForwardReason::kMemory) out += std::string(" (") + mem.why + ")";
  return out;
}

ncclResult_t InterposedFront::all_reduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  AllReduceCall call{sendbuff, recvbuff, count, datatype, op, stream, {}};
  PolicyInput in = policy_input(c, op, datatype, count, stream);
  PolicyDecision d = decide(in);
  if (d.needs_memory) {
    const size_t bytes = nccl_bytes(datatype, count);
    call.mem = classify_buffers(sendbuff, bytes, recvbuff, bytes);  // for the policy and the run
    d = decide_with_memory(in, call.mem);
  }
  const bool logging = call_log_enabled();
  const CallRecord rec{"AllReduce", sendbuff, recvbuff,
                       count,       datatype, static_cast<int>(op),
                       -1,          comm,     c != nullptr ? c->nranks() : 0,
                       stream};
  auto forward_it = [this, sendbuff, recvbuff, count, datatype, op, comm, stream] {
    return forward(real_.ncclAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op,
                   comm, stream);
  };
  if (!d.take_over) {
    if (logging) log_call(rec, forwarded_outcome(d, call.mem).c_str(), real_.ncclCommCount);
    if (c != nullptr) c->count_forwarded();
    return forward_it();
  }
  kernels::ElemType et{};
  Status st = validate_allreduce(call, &et);
  if (!st.ok()) {
    if (logging) log_call(rec, "refused: invalid arguments", real_.ncclCommCount);
    return report(st, "ncclAllReduce");
  }
  if (takes_nccl_phases(*c, call)) {
    if (logging) {
      log_call(rec,
               (taken_over_outcome(false) + ", hierarchical (NCCL's intra-node phases)").c_str(),
               real_.ncclCommCount);
    }
    return run_nccl_phases(real_, comm, *c, call, et);
  }
  if (group::active()) {
    // Launched at the outermost ncclGroupEnd, as NCCL launches its own; a simulated group hands
    // it to the real NCCL instead, whose simulation counts it (and nothing runs).
    if (logging) {
      log_call(rec, (taken_over_outcome(false) + ", launched at ncclGroupEnd").c_str(),
               real_.ncclCommCount);
    }
    group::defer_call({[c, call, et] { return start_allreduce(*c, call, et, false); },
                       [c, forward_it] {
                         c->count_forwarded();
                         return forward_it();
                       }});
    return ncclSuccess;
  }
  if (logging) log_call(rec, taken_over_outcome(false).c_str(), real_.ncclCommCount);
  return run_allreduce(*c, call, et, /*exact=*/false);
}

ncclResult_t InterposedFront::group_start() {
  group::start();
  return forward(real_.ncclGroupStart, "ncclGroupStart");
}

ncclResult_t InterposedFront::group_end() {
  // The real group first: it launches the forwarded calls and completes real inits and splits
  // (whose handles SketchCCL's deferred work then uses).
  if (real_.ncclGroupEnd == nullptr) return missing_real("ncclGroupEnd");
  ncclResult_t real_result = forward(real_.ncclGroupEnd, "ncclGroupEnd");
  Status st = group::end();
  if (real_result != ncclSuccess && real_result != ncclInProgress) return real_result;
  if (!st.ok() && st.code() != Code::kInProgress) return report(st, "ncclGroupEnd");
  if (real_result == ncclInProgress || st.code() == Code::kInProgress) return ncclInProgress;
  return ncclSuccess;
}

ncclResult_t InterposedFront::group_simulate_end(ncclSimInfo_t* simInfo) {
  // Ends SketchCCL's group too (its depth must not leak). The calls it deferred go to the real
  // NCCL before its simulation ends the real group, so NCCL simulates them and nothing runs.
  if (real_.ncclGroupSimulateEnd == nullptr) return missing_real("ncclGroupSimulateEnd");
  Status waited = Status::Ok();
  const ncclResult_t handed = group::simulate_end(&waited);
  ncclResult_t real_result = forward(real_.ncclGroupSimulateEnd, "ncclGroupSimulateEnd", simInfo);
  if (real_result != ncclSuccess && real_result != ncclInProgress) return real_result;
  if (handed != ncclSuccess) return handed;
  if (!waited.ok() && waited.code() != Code::kInProgress) return report(waited, "ncclGroupEnd");
  return real_result;
}

const char* InterposedFront::get_error_string(ncclResult_t result) {
  if (real_.ncclGetErrorString != nullptr) return real_.ncclGetErrorString(result);
  return error_string(result);
}

const char* InterposedFront::get_last_error(ncclComm_t comm) {
  if (!last_error_is_ours() && real_.ncclGetLastError != nullptr) {
    return real_.ncclGetLastError(comm);
  }
  return last_error_text();
}

}  // namespace sketchccl::interpose
