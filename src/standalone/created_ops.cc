// ncclRedOpCreatePreMulSum / ncclRedOpDestroy in standalone mode: ops are per communicator,
// numbered from ncclNumOps as NCCL numbers them; a destroyed op's number may be reused.
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/backend/cuda_stage.h"
#include "src/standalone/exact_calls.h"
#include "src/standalone/front.h"

namespace sketchccl::standalone {
namespace {

struct CreatedOp {
  bool live = false;
  ncclDataType_t type = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  uint8_t value[8] = {};        // host immediate: the scalar, copied at creation
  const void* where = nullptr;  // ncclScalarDevice: read at every call
};

struct OpTable {
  std::mutex mu;
  std::map<ncclComm_t, std::vector<CreatedOp>> ops;
};

OpTable& table() {
  static OpTable* t = new OpTable;  // never destroyed: used until the last exit handler
  return *t;
}

size_t type_bytes(ncclDataType_t t) {
  DType d{};
  return exact_type(t, &d).ok() ? dtype_size(d) : 0;
}

// The scalar's bits as the accumulator computes with them (RedOp).
void scalar_of(ncclDataType_t t, const uint8_t* v, RedOp* op) {
  DType d{};
  (void)exact_type(t, &d);
  switch (d) {
    case DType::kI8: {
      int8_t x;
      std::memcpy(&x, v, 1);
      op->int_scalar = static_cast<uint64_t>(static_cast<int64_t>(x));
      return;
    }
    case DType::kU8:
      op->int_scalar = v[0];
      return;
    case DType::kI32: {
      int32_t x;
      std::memcpy(&x, v, 4);
      op->int_scalar = static_cast<uint64_t>(static_cast<int64_t>(x));
      return;
    }
    case DType::kU32: {
      uint32_t x;
      std::memcpy(&x, v, 4);
      op->int_scalar = x;
      return;
    }
    case DType::kI64:
    case DType::kU64:
      std::memcpy(&op->int_scalar, v, 8);
      return;
    case DType::kF32: {
      float x;
      std::memcpy(&x, v, 4);
      op->float_scalar = x;
      return;
    }
    case DType::kF64:
      std::memcpy(&op->float_scalar, v, 8);
      return;
    default: {
      // The narrow floats: their value through the accumulator's conversion.
      float f = 0;
      RedOp plain;
      acc_load(d, plain, v, 1, &f);
      op->float_scalar = f;
      return;
    }
  }
}

}  // namespace

Status exact_op(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t t, RedOp* out) {
  if (op >= ncclSum && op < ncclNumOps) {
    out->kind = static_cast<RedKind>(op);
    return Status::Ok();
  }
  const int index = static_cast<int>(op) - static_cast<int>(ncclNumOps);
  OpTable& tab = table();
  std::lock_guard<std::mutex> lock(tab.mu);
  auto it = tab.ops.find(comm);
  if (index < 0 || it == tab.ops.end() || static_cast<size_t>(index) >= it->second.size() ||
      !it->second[static_cast<size_t>(index)].live) {
    return errorf(Code::kInvalidArgument,
                  "reduction op %d is neither built in nor created on this communicator",
                  static_cast<int>(op));
  }
  const CreatedOp& c = it->second[static_cast<size_t>(index)];
  if (c.type != t) {
    return errorf(Code::kInvalidArgument,
                  "reduction op %d was created for datatype %d, used with datatype %d",
                  static_cast<int>(op), static_cast<int>(c.type), static_cast<int>(t));
  }
  out->kind = RedKind::kPreMulSum;
  if (c.residence == ncclScalarHostImmediate) {
    scalar_of(t, c.value, out);
    return Status::Ok();
  }
  // ncclScalarDevice: read at every call, from device memory through a staged copy (the
  // default stream drained first), else from host memory.
  uint8_t v[8] = {};
  if (backend::has_cuda_backend() && backend::is_device_pointer(c.where)) {
    SCCL_RETURN_IF_ERROR(backend::stage_to_host(v, c.where, type_bytes(t), nullptr));
  } else {
    std::memcpy(v, c.where, type_bytes(t));
  }
  scalar_of(t, v, out);
  return Status::Ok();
}

ncclResult_t StandaloneFront::ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                       ncclDataType_t datatype,
                                                       ncclScalarResidence_t residence,
                                                       ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  if (api::Runtime::get().find(comm) == nullptr) {
    return api::report(Status(Code::kInvalidArgument, "comm is not a live communicator"), fn);
  }
  DType d{};
  Status st = exact_type(datatype, &d);
  if (!st.ok()) return api::report(st, fn);
  if (op == nullptr || scalar == nullptr) {
    return api::report(Status(Code::kInvalidArgument, "op or scalar is NULL"), fn);
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    return api::report(errorf(Code::kInvalidArgument, "scalar residence %d is unknown",
                              static_cast<int>(residence)),
                       fn);
  }
  CreatedOp c;
  c.live = true;
  c.type = datatype;
  c.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(c.value, scalar, dtype_size(d));
  } else {
    c.where = scalar;
  }
  OpTable& tab = table();
  std::lock_guard<std::mutex> lock(tab.mu);
  std::vector<CreatedOp>& ops = tab.ops[comm];
  size_t i = 0;
  while (i < ops.size() && ops[i].live)
    ++i;
  if (i == ops.size()) ops.push_back(c);
  ops[i] = c;
  *op = static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + static_cast<int>(i));
  return ncclSuccess;
}

ncclResult_t StandaloneFront::ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclRedOpDestroy";
  const int index = static_cast<int>(op) - static_cast<int>(ncclNumOps);
  if (index < 0) {
    return api::report(
        errorf(Code::kInvalidArgument, "op %d is built in, not created", static_cast<int>(op)), fn);
  }
  OpTable& tab = table();
  std::lock_guard<std::mutex> lock(tab.mu);
  auto it = tab.ops.find(comm);
  if (it == tab.ops.end() || static_cast<size_t>(index) >= it->second.size() ||
      !it->second[static_cast<size_t>(index)].live) {
    return api::report(errorf(Code::kInvalidArgument, "op %d was not created on this communicator",
                              static_cast<int>(op)),
                       fn);
  }
  it->second[static_cast<size_t>(index)].live = false;
  return ncclSuccess;
}

}  // namespace sketchccl::standalone
