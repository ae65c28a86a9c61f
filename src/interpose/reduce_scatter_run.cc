#include "src/interpose/reduce_scatter_run.h"

#include <cstdint>

#include "src/interpose/group.h"
#include "src/interpose/last_error.h"

namespace sketchccl::interpose {

Status validate_reduce_scatter(const ReduceScatterCall& call, kernels::ElemType* et) {
  // Type and op as AllReduce's (a call of no elements checks nothing else).
  AllReduceCall types;
  types.type = call.type;
  types.op = call.op;
  SCCL_RETURN_IF_ERROR(validate_allreduce(types, et));
  if (call.recvcount == 0) return Status::Ok();
  if (call.send == nullptr || call.recv == nullptr) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  const size_t esz = kernels::elem_size(*et);
  const auto p = static_cast<size_t>(call.nranks);
  if (call.recvcount > SIZE_MAX / esz / p) {
    return errorf(Code::kInvalidArgument, "recvcount %zu times %d ranks overflows", call.recvcount,
                  call.nranks);
  }
  const auto s = reinterpret_cast<uintptr_t>(call.send);
  const auto r = reinterpret_cast<uintptr_t>(call.recv);
  if (s % esz != 0 || r % esz != 0) {
    return errorf(Code::kInvalidArgument, "buffers must be aligned to %zu bytes", esz);
  }
  const size_t recv_bytes = call.recvcount * esz;
  const size_t send_bytes = recv_bytes * p;
  const uintptr_t in_place = s + static_cast<size_t>(call.rank) * recv_bytes;
  if (r != in_place && s < r + recv_bytes && r < s + send_bytes) {
    return errorf(Code::kInvalidArgument,
                  "recvbuff overlaps sendbuff without being its chunk of rank %d (in place is "
                  "recvbuff == sendbuff + rank * recvcount)",
                  call.rank);
  }
  return validate_memory(call.mem);
}

Status start_reduce_scatter(coll::Communicator& comm, const ReduceScatterCall& call,
                            kernels::ElemType et, bool exact) {
  coll::AllReduceArgs args;
  args.send = call.send;
  args.recv = call.recv;
  args.count = call.recvcount * static_cast<size_t>(call.nranks);
  args.type = et;
  args.avg = call.op == ncclAvg;
  args.exact = exact;
  args.mem = call.mem.type;
  args.kind = coll::CallKind::kReduceScatter;
  if (args.mem == backend::MemoryType::kDevice) {
    // Enqueued on the stream, as a device AllReduce (docs/cuda.md).
    if (call.recvcount == 0) return Status::Ok();
    return comm.submit_allreduce_stream(args, call.stream);
  }
  auto work = comm.submit_allreduce(args);
  if (group::active()) {
    group::defer(work, false);
    return Status::Ok();
  }
  return work->wait();
}

ncclResult_t run_reduce_scatter(coll::Communicator& comm, const ReduceScatterCall& call,
                                kernels::ElemType et, bool exact) {
  return report(start_reduce_scatter(comm, call, et, exact), "ncclReduceScatter");
}

}  // namespace sketchccl::interpose
