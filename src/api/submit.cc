#include "src/api/submit.h"

#include "src/api/group.h"

namespace sketchccl::api {

coll::AllReduceArgs engine_args(const CollCall& call, int nranks, EngineRun run) {
  coll::AllReduceArgs args;
  args.send = call.send;
  args.recv = call.recv;
  args.count = input_count(call, nranks);
  args.type = call.elem;
  args.avg = call.op == ncclAvg;
  args.exact = run == EngineRun::kExact;
  args.has_codec = call.has_codec;
  args.codec = call.codec;
  args.mem = call.mem.type;
  const bool rs = call.kind == CollKind::kReduceScatter;
  if (run == EngineRun::kRail) {
    args.kind = rs ? coll::CallKind::kRailReduceScatter : coll::CallKind::kRail;
  } else {
    args.kind = rs ? coll::CallKind::kReduceScatter : coll::CallKind::kAllReduce;
  }
  return args;
}

Status submit(coll::Communicator& comm, const CollCall& call, EngineRun run, bool* started) {
  if (started != nullptr) *started = false;
  // A rail phase runs among the rail's ranks, one per node (a ReduceScatter's input is theirs).
  const int nranks = run == EngineRun::kRail ? comm.topology().nodes : comm.nranks();
  const coll::AllReduceArgs args = engine_args(call, nranks, run);
  if (args.mem == backend::MemoryType::kDevice) {
    // Device buffers (docs/cuda.md): staged on the stream; never blocks, inside a group or not.
    // Failures found later are the communicator's async error (ncclCommGetAsyncError), as NCCL.
    if (call.count == 0) return Status::Ok();
    return comm.submit_allreduce_stream(args, call.stream, started);
  }
  auto work = comm.submit_allreduce(args);
  if (started != nullptr) *started = true;
  if (group::active()) {
    group::defer(work, false);
    return Status::Ok();
  }
  return work->wait();
}

}  // namespace sketchccl::api
