#include "src/api/side.h"

#include "src/api/group.h"
#include "src/api/runtime.h"
#include "src/core/log.h"

namespace sketchccl::api {

SplitOutcome split_side(coll::Communicator& parent, int color, int key, bool child_nonblocking,
                        std::function<void(const std::shared_ptr<coll::Communicator>&)> adopt) {
  auto child = std::make_shared<std::shared_ptr<coll::Communicator>>();
  auto work =
      parent.submit_split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key, child_nonblocking, child);
  auto finish = [adopt, child](const Status& s) {
    if (s.ok() && *child) adopt(*child);
  };
  SplitOutcome out;
  if (group::active()) {
    group::defer(work, false, [finish, child](const Status& s) {
      finish(s);
      // A failed join shows in the child's ncclCommGetAsyncError.
      if (s.ok() && *child) (void)(*child)->init_work()->wait();
    });
    out.deferred = true;
    return out;
  }
  out.status = work->wait();
  finish(out.status);
  out.child = *child;
  return out;
}

Detached destroy_side(ncclComm_t comm) {
  Runtime& rt = Runtime::get();
  Detached out;
  auto c = comm != nullptr ? rt.remove(comm) : nullptr;
  if (c == nullptr) return out;
  out.found = true;
  out.status = c->finalize();
  rt.write_stats(*c);
  return out;
}

bool abort_side(ncclComm_t comm) {
  auto c = stop_side(comm);
  if (c == nullptr) return false;
  join_side(std::move(c));
  return true;
}

std::shared_ptr<coll::Communicator> stop_side(ncclComm_t comm) {
  auto c = comm != nullptr ? Runtime::get().remove(comm) : nullptr;
  if (c != nullptr) c->signal_abort();
  return c;
}

void join_side(std::shared_ptr<coll::Communicator> comm) {
  if (comm == nullptr) return;
  if (!comm->join_proxy_within(kSideJoinSeconds)) {
    SCCL_WARN(kLogInit,
              "rank %d: SketchCCL's proxy did not stop within %.0f s of the abort; it is left "
              "running",
              comm->rank(), kSideJoinSeconds);
    (void)new std::shared_ptr<coll::Communicator>(comm);  // the detached proxy still uses it
  }
  Runtime::get().write_stats(*comm);
}

}  // namespace sketchccl::api
