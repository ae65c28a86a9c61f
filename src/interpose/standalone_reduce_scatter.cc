// ReduceScatter without a real NCCL (float32/float16/bfloat16, sum/avg): SketchCCL runs it
// itself, on host memory or, with the CUDA backend, on device memory; below SKETCHCCL_MIN_BYTES
// of input it runs exact (`none`), as AllReduce does. Other types and ops run exact on host
// memory (standalone_exact.h).
#include "src/backend/cuda_query.h"
#include "src/core/config.h"
#include "src/interpose/last_error.h"
#include "src/interpose/reduce_scatter_run.h"
#include "src/interpose/runtime.h"
#include "src/interpose/standalone_exact.h"
#include "src/interpose/standalone_front.h"

namespace sketchccl::interpose {

ncclResult_t StandaloneFront::reduce_scatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             ncclComm_t comm, cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                  "ncclReduceScatter");
  }
  // The other types and ops (every one NCCL accepts) run the exact engine.
  if (!compressed_eligible(datatype, op)) {
    return exact_call(coll::CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op,
                      0, comm, stream, "ncclReduceScatter");
  }
  ReduceScatterCall call;
  call.send = sendbuff;
  call.recv = recvbuff;
  call.recvcount = recvcount;
  call.type = datatype;
  call.op = op;
  call.stream = stream;
  call.rank = c->rank();
  call.nranks = c->nranks();
  // Host memory positively, or device memory (run only with the CUDA backend); else an error.
  const size_t recv_bytes = nccl_bytes(datatype, recvcount);
  const size_t send_bytes = recv_bytes > SIZE_MAX / static_cast<size_t>(call.nranks)
                                ? SIZE_MAX
                                : recv_bytes * static_cast<size_t>(call.nranks);
  call.mem = classify_buffers(sendbuff, send_bytes, recvbuff, recv_bytes);
  kernels::ElemType et{};
  Status st = validate_reduce_scatter(call, &et);
  if (!st.ok()) return report(st, "ncclReduceScatter");
  if (call.mem.type == backend::MemoryType::kDevice && backend::stream_is_capturing(stream)) {
    return report(Status(Code::kInvalidUsage,
                         "ncclReduceScatter on a stream being captured into a CUDA graph: "
                         "standalone mode cannot be captured (in front of a real NCCL the "
                         "call is forwarded)"),
                  "ncclReduceScatter");
  }
  const Config& cfg = Config::global();
  const size_t input_bytes = recvcount * static_cast<size_t>(call.nranks) * kernels::elem_size(et);
  const bool exact = !cfg.get_bool(Var::kEnable) || input_bytes < cfg.get_size(Var::kMinBytes);
  return run_reduce_scatter(*c, call, et, exact);
}

}  // namespace sketchccl::interpose
