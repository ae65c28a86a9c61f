#include "src/api/validate.h"

#include <cstdint>

#include "src/backend/cuda_query.h"

namespace sketchccl::api {

bool compressed_type(ncclDataType_t type, kernels::ElemType* elem) {
  switch (type) {
    case ncclFloat32:
      *elem = kernels::ElemType::kF32;
      return true;
    case ncclFloat16:
      *elem = kernels::ElemType::kF16;
      return true;
    case ncclBfloat16:
      *elem = kernels::ElemType::kBf16;
      return true;
    default:
      return false;
  }
}

bool compressed_op(ncclRedOp_t op) {
  return op == ncclSum || op == ncclAvg;
}

bool compressed_eligible(ncclDataType_t type, ncclRedOp_t op) {
  kernels::ElemType elem;
  return compressed_type(type, &elem) && compressed_op(op);
}

Status compressed_type_and_op(const CollCall& call, kernels::ElemType* elem) {
  if (!compressed_type(call.type, elem)) {
    return errorf(Code::kInvalidUsage,
                  "datatype %d is not one SketchCCL's compressed ring runs (float32, float16, "
                  "bfloat16 are)",
                  static_cast<int>(call.type));
  }
  if (!compressed_op(call.op)) {
    return errorf(Code::kInvalidUsage,
                  "reduction op %d is not one SketchCCL's compressed ring runs (ncclSum and "
                  "ncclAvg are)",
                  static_cast<int>(call.op));
  }
  return Status::Ok();
}

Status validate_all_reduce(const CollCall& call, kernels::ElemType* elem) {
  SCCL_RETURN_IF_ERROR(compressed_type_and_op(call, elem));
  if (call.count == 0) return Status::Ok();
  if (call.send == nullptr || call.recv == nullptr) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  const size_t esz = kernels::elem_size(*elem);
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
  return validate_memory(call.mem);
}

namespace {

// A collective between this rank's part (count elements) and a whole of P parts: a
// ReduceScatter's recvbuff and sendbuff, an AllGather's sendbuff and recvbuff. In place only where
// the part is the whole's chunk of this rank, as NCCL defines it.
Status validate_part_and_whole(const CollCall& call, int rank, int nranks, size_t esz,
                               bool part_is_recv) {
  if (call.count == 0) return Status::Ok();  // a call of no elements checks nothing else
  if (call.send == nullptr || call.recv == nullptr) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  const char* part_name = part_is_recv ? "recvbuff" : "sendbuff";
  const char* whole_name = part_is_recv ? "sendbuff" : "recvbuff";
  const char* count_name = part_is_recv ? "recvcount" : "sendcount";
  const auto p = static_cast<size_t>(nranks);
  if (call.count > SIZE_MAX / esz / p) {
    return errorf(Code::kInvalidArgument, "%s %zu times %d ranks overflows", count_name, call.count,
                  nranks);
  }
  const auto s = reinterpret_cast<uintptr_t>(call.send);
  const auto r = reinterpret_cast<uintptr_t>(call.recv);
  if (s % esz != 0 || r % esz != 0) {
    return errorf(Code::kInvalidArgument, "buffers must be aligned to %zu bytes", esz);
  }
  const uintptr_t part = part_is_recv ? r : s;
  const uintptr_t whole = part_is_recv ? s : r;
  const size_t part_bytes = call.count * esz;
  const size_t whole_bytes = part_bytes * p;
  const uintptr_t in_place = whole + static_cast<size_t>(rank) * part_bytes;
  if (part != in_place && whole < part + part_bytes && part < whole + whole_bytes) {
    return errorf(Code::kInvalidArgument,
                  "%s overlaps %s without being its chunk of rank %d (in place is %s == %s + "
                  "rank * %s)",
                  part_name, whole_name, rank, part_name, whole_name, count_name);
  }
  return validate_memory(call.mem);
}

}  // namespace

Status validate_reduce_scatter(const CollCall& call, int rank, int nranks,
                               kernels::ElemType* elem) {
  SCCL_RETURN_IF_ERROR(compressed_type_and_op(call, elem));
  return validate_part_and_whole(call, rank, nranks, kernels::elem_size(*elem), true);
}

Status validate_all_gather(const CollCall& call, int rank, int nranks, kernels::ElemType* elem) {
  if (!compressed_type(call.type, elem)) {
    return errorf(Code::kInvalidUsage,
                  "datatype %d is not one SketchCCL's compressed AllGather runs (float32, float16, "
                  "bfloat16 are)",
                  static_cast<int>(call.type));
  }
  return validate_part_and_whole(call, rank, nranks, kernels::elem_size(*elem), false);
}

Status validate(const CollCall& call, int rank, int nranks, kernels::ElemType* elem) {
  switch (call.kind) {
    case CollKind::kAllReduce:
      return validate_all_reduce(call, elem);
    case CollKind::kReduceScatter:
      return validate_reduce_scatter(call, rank, nranks, elem);
    case CollKind::kAllGather:
      return validate_all_gather(call, rank, nranks, elem);
    default:
      return errorf(Code::kInternalError, "%s is not a call SketchCCL's compressed ring runs",
                    call.api);
  }
}

Status validate_memory(const BufferMemory& mem) {
  if (!mem.known) {
    return errorf(Code::kInvalidArgument,
                  "sendbuff or recvbuff is memory SketchCCL cannot classify (%s): it runs on "
                  "readable host memory, or device memory where CUDA has a device",
                  mem.why);
  }
  if (mem.mixed) {
    return Status(
        Code::kInvalidArgument,
        "sendbuff and recvbuff must both be device memory or both host memory (page-locked "
        "host memory counts as device memory: it is stream-ordered)");
  }
  if (mem.type == backend::MemoryType::kDevice && !backend::has_cuda_backend()) {
    return Status(Code::kInvalidUsage,
                  "sendbuff and recvbuff are device memory, and this process has no CUDA backend "
                  "(a build without CUDA, no visible device, or a driver older than the CUDA "
                  "runtime SketchCCL was built with)");
  }
  return Status::Ok();
}

}  // namespace sketchccl::api
