// ReduceScatter in front of a real NCCL: taken over under AllReduce's policy (on the input's
// size, nranks · recvcount elements), else forwarded to the real one unchanged.
#include <cstdint>

#include "backend/cuda_query.h"
#include "core/config.h"
#include "core/log.h"
#include "interpose/forward.h"
#include "interpose/interposed_front.h"
#include "interpose/policy.h"
#include "interpose/reduce_scatter_run.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {

ncclResult_t InterposedFront::reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  const Config& cfg = Config::global();
  PolicyInput in;
  in.enabled = cfg.get_bool(Var::kEnable);
  in.comm = comm_state(c.get(), cfg.get_double(Var::kTimeout));
  in.one_node = in.comm == CommState::kReady && c->forwards_one_node();
  in.op = op;
  in.type = datatype;
  in.min_bytes = cfg.get_size(Var::kMinBytes);
  ReduceScatterCall call;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.recvcount = recvcount;
  call.type = datatype;
  call.op = op;
  call.stream = stream;
  if (in.comm == CommState::kReady && in.enabled) {
    call.rank = c->rank();
    call.nranks = c->nranks();
    // The policy's size is the input's; a product that overflows is refused by the validation.
    in.count = recvcount <= SIZE_MAX / static_cast<size_t>(call.nranks)
                   ? recvcount * static_cast<size_t>(call.nranks)
                   : SIZE_MAX / 4;
    in.capturing = backend::stream_is_capturing(stream);
    call.mem = classify_buffers(sendbuff, recvbuff);
    in.mem = call.mem.type;
    in.cuda_backend = backend::has_cuda_backend();
  }
  PolicyDecision d = decide(in);
  if (!d.take_over) {
    SCCL_TRACE(kLogColl, "ncclReduceScatter of %zu elements per rank forwarded: %s", recvcount,
               d.reason);
    if (c != nullptr) c->count_forwarded();
    return forward(real_.ncclReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount,
                   datatype, op, comm, stream);
  }
  kernels::ElemType et{};
  Status st = validate_reduce_scatter(call, &et);
  if (!st.ok()) return report(st, "ncclReduceScatter");
  return run_reduce_scatter(*c, call, et, /*exact=*/false);
}

}  // namespace sketchccl::interpose
