// AllReduce, groups and error queries in front of a real NCCL: the policy decides, per call,
// whether SketchCCL takes an AllReduce over; everything else is the real NCCL's.
#include <chrono>
#include <string>
#include <thread>

#include "backend/cuda_query.h"
#include "core/config.h"
#include "core/log.h"
#include "interpose/allreduce_run.h"
#include "interpose/forward.h"
#include "interpose/group.h"
#include "interpose/hierarchy_run.h"
#include "interpose/interposed_front.h"
#include "interpose/policy.h"
#include "interpose/runtime.h"

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
  if (!init->wait().ok()) return CommState::kFailed;
  if (!c->configs_agree()) return CommState::kDisagree;
  return CommState::kReady;
}

ncclResult_t InterposedFront::all_reduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  const Config& cfg = Config::global();
  AllReduceCall call{sendbuff, recvbuff, count, datatype, op, stream, {}};
  PolicyInput in;
  in.enabled = cfg.get_bool(Var::kEnable);
  in.comm = comm_state(c.get(), cfg.get_double(Var::kTimeout));
  in.one_node = in.comm == CommState::kReady && c->forwards_one_node();
  in.op = op;
  in.type = datatype;
  in.count = count;
  in.min_bytes = cfg.get_size(Var::kMinBytes);
  if (in.comm == CommState::kReady && in.enabled) {
    in.capturing = backend::stream_is_capturing(stream);
    call.mem = classify_buffers(sendbuff, recvbuff);  // once: for the policy and the take-over
    in.mem = call.mem.type;
    in.cuda_backend = backend::has_cuda_backend();
  }
  PolicyDecision d = decide(in);
  if (!d.take_over) {
    SCCL_TRACE(kLogColl, "ncclAllReduce of %zu elements forwarded: %s", count, d.reason);
    if (c != nullptr) c->count_forwarded();
    return forward(real_.ncclAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op,
                   comm, stream);
  }
  kernels::ElemType et{};
  Status st = validate_allreduce(call, &et);
  if (!st.ok()) return report(st, "ncclAllReduce");
  if (takes_nccl_phases(*c, call)) return run_nccl_phases(real_, comm, *c, call, et);
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
