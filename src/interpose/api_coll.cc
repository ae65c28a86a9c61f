// Collectives, groups and error queries of the NCCL API. Standalone: SketchCCL runs AllReduce
// (float32/float16/bfloat16, sum/avg) on host memory; anything else is ncclInvalidUsage.
#include <nccl.h>

#include <cstdint>
#include <string>

#include "core/config.h"
#include "interpose/exports.h"
#include "interpose/forward.h"
#include "interpose/group.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {
namespace {

bool elem_type(ncclDataType_t t, kernels::ElemType* out) {
  switch (t) {
    case ncclFloat32:
      *out = kernels::ElemType::kF32;
      return true;
    case ncclFloat16:
      *out = kernels::ElemType::kF16;
      return true;
    case ncclBfloat16:
      *out = kernels::ElemType::kBf16;
      return true;
    default:
      return false;
  }
}

Status validate_allreduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                          ncclRedOp_t op, kernels::ElemType* et) {
  if (!elem_type(type, et)) {
    return errorf(Code::kInvalidUsage,
                  "datatype %d is not supported in standalone mode (float32, float16, bfloat16 "
                  "are; the rest needs a real NCCL)",
                  static_cast<int>(type));
  }
  if (op != ncclSum && op != ncclAvg) {
    return errorf(Code::kInvalidUsage,
                  "reduction op %d is not supported in standalone mode (ncclSum and ncclAvg are)",
                  static_cast<int>(op));
  }
  if (count == 0) return Status::Ok();
  if (send == nullptr || recv == nullptr) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  const size_t esz = kernels::elem_size(*et);
  if (count > SIZE_MAX / esz) return errorf(Code::kInvalidArgument, "count %zu overflows", count);
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  if (s % esz != 0 || r % esz != 0) {
    return errorf(Code::kInvalidArgument, "buffers must be aligned to %zu bytes", esz);
  }
  const size_t bytes = count * esz;
  if (s != r && s < r + bytes && r < s + bytes) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff overlap without being the same (in-place) buffer");
  }
  return Status::Ok();
}

const char* error_string(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

}  // namespace
}  // namespace sketchccl::interpose

using namespace sketchccl;             // NOLINT: the exported C functions below
using namespace sketchccl::interpose;  // NOLINT

SCCL_NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  SCCL_FORWARD(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
  SCCL_API_GUARD("ncclAllReduce", {
    Runtime& rt = Runtime::get();
    auto c = rt.find(comm);
    if (c == nullptr) {
      return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                    "ncclAllReduce");
    }
    kernels::ElemType et{};
    Status st = validate_allreduce(sendbuff, recvbuff, count, datatype, op, &et);
    if (!st.ok()) return report(st, "ncclAllReduce");
    coll::AllReduceArgs args;
    args.send = sendbuff;
    args.recv = recvbuff;
    args.count = count;
    args.type = et;
    args.avg = op == ncclAvg;
    // Standalone has no NCCL to forward small calls to: they run exact (`none`).
    const Config& cfg = Config::global();
    args.exact = !cfg.get_bool(Var::kEnable) ||
                 count * kernels::elem_size(et) < cfg.get_size(Var::kMinBytes);
    auto work = c->submit_allreduce(args);
    if (group::active()) {
      group::defer(work, false);
      return ncclSuccess;
    }
    return report(work->wait(), "ncclAllReduce");
  })
}

SCCL_NCCL_API(ncclResult_t, ncclGroupStart, void) {
  SCCL_FORWARD(ncclGroupStart, ());
  group::start();
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclGroupEnd, void) {
  SCCL_FORWARD(ncclGroupEnd, ());
  SCCL_API_GUARD("ncclGroupEnd", { return report(group::end(), "ncclGroupEnd"); })
}

SCCL_NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  if (!Runtime::get().standalone()) {
    auto real = real_fn<decltype(&pncclGetErrorString)>("pncclGetErrorString");
    if (real != nullptr) return real(result);
  }
  return error_string(result);
}

SCCL_NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  if (!Runtime::get().standalone()) {
    auto real = real_fn<decltype(&pncclGetLastError)>("pncclGetLastError");
    if (real != nullptr) return real(comm);
  }
  thread_local std::string text;
  text = last_error();
  return text.c_str();
}
