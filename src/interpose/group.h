// ncclGroupStart/End: per-thread nesting. Work queued inside a group is waited for at the
// outermost ncclGroupEnd, so one thread can drive several ranks without deadlock.
#pragma once

#include <functional>
#include <memory>

#include "coll/work.h"
#include "core/status.h"

namespace sketchccl::interpose::group {

bool active();
void start();
// Inside a group: `work` is waited for at the end, then `on_done(status)` runs (may be empty).
// `nonblocking`: a non-blocking communicator's work, which ncclGroupEnd does not wait for.
void defer(std::shared_ptr<coll::Work> work, bool nonblocking,
           std::function<void(const Status&)> on_done = {});
// Inside a group: `f` runs at the outermost ncclGroupEnd, before anything is waited for (the
// group's sends and receives are submitted there, together: standalone_p2p.cc).
void at_end(std::function<void()> f);
// Ok, kInProgress (non-blocking work still running), or the first failure.
Status end();

}  // namespace sketchccl::interpose::group
