#include "interpose/allreduce_run.h"

#include <cstdint>

#include "backend/cuda_query.h"
#include "interpose/group.h"
#include "interpose/last_error.h"

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

}  // namespace

BufferMemory classify_buffers(const void* send, const void* recv) {
  const bool send_dev = backend::is_device_pointer(send);
  const bool recv_dev = backend::is_device_pointer(recv);
  BufferMemory m;
  m.type = send_dev || recv_dev ? backend::MemoryType::kDevice : backend::MemoryType::kHost;
  m.mixed = send_dev != recv_dev;
  return m;
}

Status validate_allreduce(const AllReduceCall& call, kernels::ElemType* et) {
  if (!elem_type(call.type, et)) {
    return errorf(Code::kInvalidUsage,
                  "datatype %d is not supported in standalone mode (float32, float16, bfloat16 "
                  "are; the rest needs a real NCCL)",
                  static_cast<int>(call.type));
  }
  if (call.op != ncclSum && call.op != ncclAvg) {
    return errorf(Code::kInvalidUsage,
                  "reduction op %d is not supported in standalone mode (ncclSum and ncclAvg are)",
                  static_cast<int>(call.op));
  }
  if (call.count == 0) return Status::Ok();
  if (call.send == nullptr || call.recv == nullptr) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  const size_t esz = kernels::elem_size(*et);
  if (call.count > SIZE_MAX / esz) {
    return errorf(Code::kInvalidArgument, "count %zu overflows", call.count);
  }
  const auto s = reinterpret_cast<uintptr_t>(call.send);
  const auto r = reinterpret_cast<uintptr_t>(call.recv);
  if (s % esz != 0 || r % esz != 0) {
    return errorf(Code::kInvalidArgument, "buffers must be aligned to %zu bytes", esz);
  }
  const size_t bytes = call.count * esz;
  if (s != r && s < r + bytes && r < s + bytes) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff overlap without being the same (in-place) buffer");
  }
  if (call.mem.mixed) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff must both be device memory or both host memory");
  }
  return Status::Ok();
}

ncclResult_t run_allreduce(coll::Communicator& comm, const AllReduceCall& call,
                           kernels::ElemType et, bool exact) {
  coll::AllReduceArgs args;
  args.send = call.send;
  args.recv = call.recv;
  args.count = call.count;
  args.type = et;
  args.avg = call.op == ncclAvg;
  args.exact = exact;
  args.mem = call.mem.type;
  if (args.mem == backend::MemoryType::kDevice) {
    // Device buffers (docs/cuda.md): enqueued on the stream; never blocks, inside a group or not.
    // Failures found later are the communicator's async error (ncclCommGetAsyncError), as NCCL.
    if (call.count == 0) return ncclSuccess;
    return report(comm.submit_allreduce_stream(args, call.stream), "ncclAllReduce");
  }
  auto work = comm.submit_allreduce(args);
  if (group::active()) {
    group::defer(work, false);
    return ncclSuccess;
  }
  return report(work->wait(), "ncclAllReduce");
}

}  // namespace sketchccl::interpose
