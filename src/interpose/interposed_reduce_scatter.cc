// ReduceScatter in front of a real NCCL: taken over under AllReduce's policy (on the input's
// size, nranks · recvcount elements), else forwarded to the real one unchanged.
#include <cstdint>

#include "src/backend/cuda_query.h"
#include "src/core/config.h"
#include "src/core/log.h"
#include "src/interpose/call_log.h"
#include "src/interpose/forward.h"
#include "src/interpose/group.h"
#include "src/interpose/interposed_front.h"
#include "src/interpose/interposed_policy.h"
#include "src/interpose/policy.h"
#include "src/interpose/reduce_scatter_run.h"
#include "src/interpose/runtime.h"

namespace sketchccl::interpose {

ncclResult_t InterposedFront::reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  ReduceScatterCall call;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.recvcount = recvcount;
  call.type = datatype;
  call.op = op;
  call.stream = stream;
  if (c != nullptr) {
    call.rank = c->rank();
    call.nranks = c->nranks();
  }
  // The policy's size is the input's; a product that overflows is refused by the validation.
  const auto p = static_cast<size_t>(call.nranks);
  const size_t input_count = recvcount <= SIZE_MAX / p ? recvcount * p : SIZE_MAX / 4;
  PolicyInput in = policy_input(c, op, datatype, input_count, stream);
  PolicyDecision d = decide(in);
  if (d.needs_memory) {
    call.mem = classify_buffers(sendbuff, nccl_bytes(datatype, input_count), recvbuff,
                                nccl_bytes(datatype, recvcount));
    d = decide_with_memory(in, call.mem);
  }
  const bool logging = call_log_enabled();
  const CallRecord rec{"ReduceScatter",
                       sendbuff,
                       recvbuff,
                       recvcount,
                       datatype,
                       static_cast<int>(op),
                       -1,
                       comm,
                       c != nullptr ? c->nranks() : 0,
                       stream};
  auto forward_it = [this, sendbuff, recvbuff, recvcount, datatype, op, comm, stream] {
    return forward(real_.ncclReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount,
                   datatype, op, comm, stream);
  };
  if (!d.take_over) {
    if (logging) log_call(rec, forwarded_outcome(d, call.mem).c_str(), real_.ncclCommCount);
    if (c != nullptr) c->count_forwarded();
    return forward_it();
  }
  kernels::ElemType et{};
  Status st = validate_reduce_scatter(call, &et);
  if (!st.ok()) {
    if (logging) log_call(rec, "refused: invalid arguments", real_.ncclCommCount);
    return report(st, "ncclReduceScatter");
  }
  if (group::active()) {
    // As AllReduce: launched at the outermost ncclGroupEnd, or simulated by the real NCCL.
    if (logging) {
      log_call(rec, (taken_over_outcome(false) + ", launched at ncclGroupEnd").c_str(),
               real_.ncclCommCount);
    }
    group::defer_call({[c, call, et] { return start_reduce_scatter(*c, call, et, false); },
                       [c, forward_it] {
                         c->count_forwarded();
                         return forward_it();
                       }});
    return ncclSuccess;
  }
  if (logging) log_call(rec, taken_over_outcome(false).c_str(), real_.ncclCommCount);
  return run_reduce_scatter(*c, call, et, /*exact=*/false);
}

}  // namespace sketchccl::interpose
