// AllReduce, groups and error queries without a real NCCL: SketchCCL runs AllReduce
// (float32/float16/bfloat16, sum/avg) itself, on host memory or, with the CUDA backend, on
// device memory; the other types and ops run exact on host memory (standalone_exact.h).
#include "src/backend/cuda_query.h"
#include "src/core/config.h"
#include "src/interpose/allreduce_run.h"
#include "src/interpose/group.h"
#include "src/interpose/last_error.h"
#include "src/interpose/runtime.h"
#include "src/interpose/standalone_exact.h"
#include "src/interpose/standalone_front.h"

namespace sketchccl::interpose {

ncclResult_t StandaloneFront::all_reduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                  "ncclAllReduce");
  }
  // The other types and ops (every one NCCL accepts) run the exact engine.
  if (!compressed_eligible(datatype, op)) {
    return exact_call(coll::CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm,
                      stream, "ncclAllReduce");
  }
  AllReduceCall call{sendbuff, recvbuff, count, datatype, op, stream, {}};
  // Host memory positively, or device memory (run only with the CUDA backend); else an error.
  const size_t bytes = nccl_bytes(datatype, count);
  call.mem = classify_buffers(sendbuff, bytes, recvbuff, bytes);
  kernels::ElemType et{};
  Status st = validate_allreduce(call, &et);
  if (!st.ok()) return report(st, "ncclAllReduce");
  // No NCCL to forward to: device buffers are refused where they cannot run.
  if (call.mem.type == backend::MemoryType::kDevice && backend::stream_is_capturing(stream)) {
    return report(Status(Code::kInvalidUsage,
                         "ncclAllReduce on a stream being captured into a CUDA graph: "
                         "standalone mode cannot be captured (in front of a real NCCL the "
                         "call is forwarded)"),
                  "ncclAllReduce");
  }
  // No NCCL to forward small calls to either: they run exact (`none`).
  const Config& cfg = Config::global();
  const bool exact =
      !cfg.get_bool(Var::kEnable) || count * kernels::elem_size(et) < cfg.get_size(Var::kMinBytes);
  return run_allreduce(*c, call, et, exact);
}

ncclResult_t StandaloneFront::group_start() {
  group::start();
  return ncclSuccess;
}

ncclResult_t StandaloneFront::group_end() {
  Status st = group::end();
  if (!st.ok() && st.code() != Code::kInProgress) return report(st, "ncclGroupEnd");
  if (st.code() == Code::kInProgress) return ncclInProgress;
  return ncclSuccess;
}

const char* StandaloneFront::get_error_string(ncclResult_t result) {
  return error_string(result);
}

const char* StandaloneFront::get_last_error(ncclComm_t /*comm*/) {
  return last_error_text();
}

}  // namespace sketchccl::interpose
