#include "interpose/group.h"

#include <vector>

namespace sketchccl::interpose::group {
namespace {

struct Deferred {
  std::shared_ptr<coll::Work> work;
  bool nonblocking;
  std::function<void(const Status&)> on_done;
};

struct GroupState {
  int depth = 0;
  std::vector<Deferred> pending;
  std::vector<std::function<void()>> at_end;
};

GroupState& state() {
  thread_local GroupState s;
  return s;
}

}  // namespace

bool active() {
  return state().depth > 0;
}

void start() {
  state().depth++;
}

void defer(std::shared_ptr<coll::Work> work, bool nonblocking,
           std::function<void(const Status&)> on_done) {
  state().pending.push_back({std::move(work), nonblocking, std::move(on_done)});
}

void at_end(std::function<void()> f) {
  state().at_end.push_back(std::move(f));
}

Status end() {
  GroupState& s = state();
  if (s.depth == 0) return Status(Code::kInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--s.depth > 0) return Status::Ok();
  std::vector<std::function<void()>> hooks;
  hooks.swap(s.at_end);
  for (auto& f : hooks)
    f();
  std::vector<Deferred> pending;
  pending.swap(s.pending);
  Status first = Status::Ok();
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

}  // namespace sketchccl::interpose::group
