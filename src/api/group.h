// ncclGroupStart/End: per-thread nesting. Work queued inside a group is waited for at the
// outermost ncclGroupEnd, so one thread can drive several ranks without deadlock.
#pragma once

#include <nccl.h>

#include <functional>
#include <memory>

#include "src/coll/work.h"
#include "src/core/status.h"

namespace sketchccl::api::group {

// Inside a group, or launching its calls at the outermost end (work submitted then is deferred
// too, so that one thread's ranks all start before any is waited for).
bool active();
void start();
// Inside a group: `work` is waited for at the end, then `on_done(status)` runs (may be empty).
// `nonblocking`: a non-blocking communicator's work, which ncclGroupEnd does not wait for.
void defer(std::shared_ptr<coll::Work> work, bool nonblocking,
           std::function<void(const Status&)> on_done = {});

// A taken-over call made inside a group (or standalone's group of sends and receives,
// src/standalone/p2p_calls.cc): started at the outermost ncclGroupEnd, as NCCL launches its own
// there; ncclGroupSimulateEnd hands it to `simulate` instead (forwarded to the real NCCL, whose
// simulation counts it) and runs nothing of it.
struct DeferredCall {
  std::function<Status()> launch;
  std::function<ncclResult_t()> simulate;  // empty: nothing to simulate it with (dropped)
};
void defer_call(DeferredCall call);

// While the outermost end launches the deferred calls: a staged device call's stream operations
// (coll::Communicator::enqueue_stream_head / _tail), run once every deferred call is launched, the
// heads of all of them first, then the tails: every call's staging is leased (a pinned
// allocation may synchronize the device) and every input flag enqueued before any stream waits,
// so one thread's ranks never wait for each other, on one stream or several. Outside a launch
// they run at once, head then tail.
Status stream_ops(std::function<Status()> head, std::function<Status()> tail);

// Ok, kInProgress (non-blocking work still running), or the first failure. The outermost end
// launches the deferred calls, then their stream operations, then waits.
Status end();
// ncclGroupSimulateEnd: ends the group as end() does (outside a group: nothing, the real NCCL
// answers), but the deferred calls are simulated, not launched. Returns the first failing
// simulate's result (ncclSuccess otherwise); *waited gets end()'s status for the work already
// running (joins, splits).
ncclResult_t simulate_end(Status* waited);

}  // namespace sketchccl::api::group
