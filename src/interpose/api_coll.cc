// Collectives, groups and error queries of the NCCL API. Standalone: SketchCCL runs AllReduce
// (float32/float16/bfloat16, sum/avg) on host memory; anything else is ncclInvalidUsage.
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "backend/cuda_query.h"
#include "core/config.h"
#include "core/log.h"
#include "interpose/exports.h"
#include "interpose/forward.h"
#include "interpose/group.h"
#include "interpose/policy.h"
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

// The communicator's agreed state; waits (bounded) for a join still running, so that the first
// call after init sees the same state on every rank.
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

}  // namespace
}  // namespace sketchccl::interpose

using namespace sketchccl;             // NOLINT: the exported C functions below
using namespace sketchccl::interpose;  // NOLINT

SCCL_NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t stream){SCCL_API_GUARD(
    "ncclAllReduce",
    {
      Runtime& rt = Runtime::get();
      auto c = rt.find(comm);
      const Config& cfg = Config::global();
      if (!rt.standalone()) {
        PolicyInput in;
        in.enabled = cfg.get_bool(Var::kEnable);
        in.comm = comm_state(c.get(), cfg.get_double(Var::kTimeout));
        in.op = op;
        in.type = datatype;
        in.count = count;
        in.min_bytes = cfg.get_size(Var::kMinBytes);
        if (in.comm == CommState::kReady && in.enabled) {
          in.capturing = backend::stream_is_capturing(stream);
          in.device_memory =
              backend::is_device_pointer(sendbuff) || backend::is_device_pointer(recvbuff);
          in.cuda_backend = backend::has_cuda_backend();
        }
        PolicyDecision d = decide(in);
        if (!d.take_over) {
          SCCL_TRACE(kLogColl, "ncclAllReduce of %zu elements forwarded: %s", count, d.reason);
          if (c != nullptr) c->count_forwarded();
          SCCL_FORWARD(ncclAllReduce, (sendbuff, recvbuff, count, datatype, op, comm, stream));
        }
      } else if (c == nullptr) {
        return report(Status(Code::kInvalidArgument, "comm is not a live communicator"),
                      "ncclAllReduce");
      }
      kernels::ElemType et{};
      Status st = validate_allreduce(sendbuff, recvbuff, count, datatype, op, &et);
      if (!st.ok()) return report(st, "ncclAllReduce");
      // Device buffers (docs/cuda.md): stream-ordered on the CUDA backend. In front of a real
      // NCCL the policy only takes them over when that backend exists; standalone has no one to
      // forward to, so they are refused where it cannot run them.
      bool device = false;
      if (backend::has_cuda_backend()) {
        const bool send_dev = backend::is_device_pointer(sendbuff);
        const bool recv_dev = backend::is_device_pointer(recvbuff);
        if (count > 0 && send_dev != recv_dev) {
          return report(Status(Code::kInvalidArgument,
                               "sendbuff and recvbuff must both be device memory or both host "
                               "memory"),
                        "ncclAllReduce");
        }
        device = send_dev || recv_dev;
      }
      if (device && rt.standalone() && backend::stream_is_capturing(stream)) {
        return report(Status(Code::kInvalidUsage,
                             "ncclAllReduce on a stream being captured into a CUDA graph: "
                             "standalone mode cannot be captured (in front of a real NCCL the "
                             "call is forwarded)"),
                      "ncclAllReduce");
      }
      coll::AllReduceArgs args;
      args.send = sendbuff;
      args.recv = recvbuff;
      args.count = count;
      args.type = et;
      args.avg = op == ncclAvg;
      // Standalone has no NCCL to forward small calls to: they run exact (`none`).
      args.exact =
          rt.standalone() && (!cfg.get_bool(Var::kEnable) ||
                              count * kernels::elem_size(et) < cfg.get_size(Var::kMinBytes));
      if (device) {
        // Enqueued on `stream`; never blocks, inside a group or not. Failures found later are
        // the communicator's async error (ncclCommGetAsyncError), as with NCCL.
        args.mem = backend::MemoryType::kDevice;
        if (count == 0) return ncclSuccess;
        return report(c->submit_allreduce_stream(args, stream), "ncclAllReduce");
      }
      auto work = c->submit_allreduce(args);
      if (group::active()) {
        group::defer(work, false);
        return ncclSuccess;
      }
      return report(work->wait(), "ncclAllReduce");
    })}

SCCL_NCCL_API(ncclResult_t, ncclGroupStart, void) {
  group::start();
  SCCL_FORWARD(ncclGroupStart, ());
  return ncclSuccess;
}

SCCL_NCCL_API(ncclResult_t, ncclGroupEnd, void){
    SCCL_API_GUARD("ncclGroupEnd",
                   {
                     ncclResult_t real_result = ncclSuccess;
                     if (!Runtime::get().standalone()) {
                       // The real group first: it launches the forwarded calls and completes real
                       // inits and splits (whose handles SketchCCL's deferred work then uses).
                       auto real = real_fn<decltype(&pncclGroupEnd)>("pncclGroupEnd");
                       if (real == nullptr) return missing_real("ncclGroupEnd");
                       real_result = forwarded(real());
                     }
                     Status st = group::end();
                     if (real_result != ncclSuccess && real_result != ncclInProgress)
                       return real_result;
                     if (!st.ok() && st.code() != Code::kInProgress)
                       return report(st, "ncclGroupEnd");
                     if (real_result == ncclInProgress || st.code() == Code::kInProgress)
                       return ncclInProgress;
                     return ncclSuccess;
                   })}

SCCL_NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  if (!Runtime::get().standalone()) {
    auto real = real_fn<decltype(&pncclGetErrorString)>("pncclGetErrorString");
    if (real != nullptr) return real(result);
  }
  return error_string(result);
}

SCCL_NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  if (!Runtime::get().standalone() && !last_error_is_ours()) {
    auto real = real_fn<decltype(&pncclGetLastError)>("pncclGetLastError");
    if (real != nullptr) return real(comm);
  }
  thread_local std::string text;
  text = last_error();
  return text.c_str();
}
