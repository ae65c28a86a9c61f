#include "src/interpose/allreduce_run.h"

#include <cstdint>

#include "src/backend/cuda_query.h"
#include "src/interpose/group.h"
#include "src/interpose/last_error.h"

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

BufferMemory classify_buffers(const void* send, size_t send_bytes, const void* recv,
                              size_t recv_bytes) {
  const backend::MemoryQuery s = backend::classify_memory(send, send_bytes);
  const backend::MemoryQuery r =
      recv == send ? s : backend::classify_memory(recv, recv_bytes);  // in place: asked once
  BufferMemory m;
  if (s.cls == backend::MemoryClass::kUnknown || r.cls == backend::MemoryClass::kUnknown) {
    m.known = false;
    m.why = s.cls == backend::MemoryClass::kUnknown ? s.why : r.why;
    return m;
  }
  const bool send_dev = s.cls == backend::MemoryClass::kDevice;
  const bool recv_dev = r.cls == backend::MemoryClass::kDevice;
  m.type = send_dev || recv_dev ? backend::MemoryType::kDevice : backend::MemoryType::kHost;
  m.mixed = send_dev != recv_dev;
  return m;
}

size_t nccl_bytes(ncclDataType_t type, size_t count) {
  size_t esz = 1;
  switch (type) {
    case ncclFloat16:
    case ncclBfloat16:
      esz = 2;
      break;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      esz = 4;
      break;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      esz = 8;
      break;
    default:
      break;
  }
  return count > SIZE_MAX / esz ? SIZE_MAX : count * esz;
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
  SCCL_RETURN_IF_ERROR(validate_memory(call.mem));
  return Status::Ok();
}

Status validate_memory(const BufferMemory& mem) {
  if (!mem.known) {
    return errorf(Code::kInvalidArgument,
                  "sendbuff or recvbuff is memory SketchCCL cannot classify (%s): it runs on "
                  "readable host memory, or device memory with the CUDA backend",
                  mem.why);
  }
  if (mem.mixed) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff must both be device memory or both host memory");
  }
  if (mem.type == backend::MemoryType::kDevice && !backend::has_cuda_backend()) {
    return Status(Code::kInvalidUsage,
                  "sendbuff and recvbuff are device memory, and this process has no CUDA backend "
                  "(a build without CUDA, no visible device, or a driver older than the CUDA "
                  "runtime SketchCCL was built with)");
  }
  return Status::Ok();
}

Status start_allreduce(coll::Communicator& comm, const AllReduceCall& call, kernels::ElemType et,
                       bool exact) {
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
    if (call.count == 0) return Status::Ok();
    return comm.submit_allreduce_stream(args, call.stream);
  }
  auto work = comm.submit_allreduce(args);
  if (group::active()) {
    group::defer(work, false);
    return Status::Ok();
  }
  return work->wait();
}

ncclResult_t run_allreduce(coll::Communicator& comm, const AllReduceCall& call,
                           kernels::ElemType et, bool exact) {
  return report(start_allreduce(comm, call, et, exact), "ncclAllReduce");
}

}  // namespace sketchccl::interpose
