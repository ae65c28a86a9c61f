#include "src/api/group.h"

#include <vector>

namespace sketchccl::api::group {
namespace {

struct Deferred {
  std::shared_ptr<coll::Work> work;
  bool nonblocking;
  std::function<void(const Status&)> on_done;
};

struct StreamOps {
  std::function<Status()> head, tail;
};

struct GroupState {
  int depth = 0;
  bool launching = false;  // the outermost end is starting the deferred calls
  std::vector<DeferredCall> calls;
  std::vector<Deferred> pending;
  std::vector<StreamOps> stream_ops;  // of the calls launched so far, while launching
};

GroupState& state() {
  thread_local GroupState s;
  return s;
}

// Waits for the deferred work, as the outermost end does.
Status wait_pending(GroupState& s, Status first) {
  std::vector<Deferred> pending;
  pending.swap(s.pending);
  bool in_progress = false;
  for (Deferred& d : pending) {
    if (d.nonblocking && !d.work->done()) {
      in_progress = true;
      continue;
    }
    Status st = d.work->wait();
    if (d.on_done) d.on_done(st);
    if (!st.ok() && first.ok()) first = st;
  }
  if (!first.ok()) return first;
  return in_progress ? Status(Code::kInProgress, "") : Status::Ok();
}

}  // namespace

bool active() {
  const GroupState& s = state();
  return s.depth > 0 || s.launching;
}

void start() {
  state().depth++;
}

void defer(std::shared_ptr<coll::Work> work, bool nonblocking,
           std::function<void(const Status&)> on_done) {
  state().pending.push_back({std::move(work), nonblocking, std::move(on_done)});
}

void defer_call(DeferredCall call) {
  state().calls.push_back(std::move(call));
}

Status stream_ops(std::function<Status()> head, std::function<Status()> tail) {
  GroupState& s = state();
  if (s.launching) {
    s.stream_ops.push_back({std::move(head), std::move(tail)});
    return Status::Ok();
  }
  SCCL_RETURN_IF_ERROR(head());
  return tail();
}

Status end() {
  GroupState& s = state();
  if (s.depth == 0) return Status(Code::kInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--s.depth > 0) return Status::Ok();
  std::vector<DeferredCall> calls;
  calls.swap(s.calls);
  Status first = Status::Ok();
  s.launching = true;
  for (DeferredCall& c : calls) {
    Status st = c.launch();
    if (!st.ok() && first.ok()) first = st;
  }
  std::vector<StreamOps> ops;
  ops.swap(s.stream_ops);
  std::vector<bool> headed(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i) {
    Status st = ops[i].head();
    headed[i] = st.ok();
    if (!st.ok() && first.ok()) first = st;
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!headed[i]) continue;  // cancelled: nothing of it waits
    Status st = ops[i].tail();
    if (!st.ok() && first.ok()) first = st;
  }
  s.launching = false;
  return wait_pending(s, first);
}

ncclResult_t simulate_end(Status* waited) {
  GroupState& s = state();
  *waited = Status::Ok();
  // Not in a group: nothing of SketchCCL's; the real NCCL's answer is the caller's.
  if (s.depth == 0 || --s.depth > 0) return ncclSuccess;
  std::vector<DeferredCall> calls;
  calls.swap(s.calls);
  ncclResult_t first = ncclSuccess;
  for (DeferredCall& c : calls) {
    if (!c.simulate) continue;
    const ncclResult_t r = c.simulate();
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  }
  *waited = wait_pending(s, Status::Ok());
  return first;
}

}  // namespace sketchccl::api::group
