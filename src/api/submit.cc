#include "src/api/submit.h"

#include "src/api/group.h"

namespace sketchccl::api {

coll::ReductionArgs engine_args(const CollCall& call, int nranks, EngineRun run) {
  coll::ReductionArgs args;
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

namespace {

// The one path of a call on `comm`'s proxy. Device buffers (docs/cuda.md): `stage` stages it on
// the call's stream; never blocks, inside a group or not; failures found later are the
// communicator's async error (ncclCommGetAsyncError), as NCCL. Host buffers: `submit_work`'s
// work, deferred to ncclGroupEnd inside a group, else waited for.
template <typename Stage, typename SubmitWork>
Status run_on_proxy(coll::Communicator& comm, const CollCall& call, bool* started,
                    const Stage& stage, const SubmitWork& submit_work) {
  if (started != nullptr) *started = false;
  if (call.mem.type == backend::MemoryType::kDevice) {
    if (call.count == 0) return Status::Ok();
    auto sc = std::make_shared<coll::Communicator::StreamCall>();
    // Inside a group's launch the group's earlier calls finish only after this one is enqueued.
    SCCL_RETURN_IF_ERROR(stage(sc.get(), !group::active()));
    void* stream = call.stream;
    // In a group launch the heads and tails wait for the group's other calls (group.h).
    Status st =
        group::stream_ops([&comm, sc, stream] { return comm.enqueue_stream_head(*sc, stream); },
                          [&comm, sc, stream] { return comm.enqueue_stream_tail(*sc, stream); });
    if (started != nullptr) *started = !sc->staged->cancelled();
    return st;
  }
  auto work = submit_work();
  if (started != nullptr) *started = true;
  if (group::active()) {
    group::defer(work, false);
    return Status::Ok();
  }
  return work->wait();
}

}  // namespace

Status submit(coll::Communicator& comm, const CollCall& call, EngineRun run, bool* started) {
  // A rail phase runs among the rail's ranks, one per node (a ReduceScatter's input is theirs).
  const int nranks = run == EngineRun::kRail ? comm.topology().nodes : comm.nranks();
  const coll::ReductionArgs args = engine_args(call, nranks, run);
  return run_on_proxy(
      comm, call, started,
      [&](coll::Communicator::StreamCall* sc, bool may_wait) {
        return comm.stage_reduction_stream(args, sc, may_wait);
      },
      [&] { return comm.submit_reduction(args); });
}

Status submit_gather(coll::Communicator& comm, const CollCall& call, kernels::CodecId codec,
                     bool* started) {
  coll::GatherArgs args;
  args.send = call.send;
  args.recv = call.recv;
  args.count = call.count;
  args.type = call.elem;
  args.codec = codec;
  return run_on_proxy(
      comm, call, started,
      [&](coll::Communicator::StreamCall* sc, bool may_wait) {
        return comm.stage_allgather_stream(args, coll::Communicator::GatherSpan::kWhole, sc,
                                           may_wait);
      },
      [&] { return comm.submit_allgather(args); });
}

}  // namespace sketchccl::api
