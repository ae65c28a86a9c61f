#include "interpose/comm_side.h"

#include "interpose/group.h"
#include "interpose/runtime.h"

namespace sketchccl::interpose {

SplitOutcome split_side(coll::Communicator& parent, int color, int key,
                        std::function<void(const std::shared_ptr<coll::Communicator>&)> adopt) {
  auto child = std::make_shared<std::shared_ptr<coll::Communicator>>();
  auto work = parent.submit_split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key, child.get());
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
  Runtime& rt = Runtime::get();
  auto c = comm != nullptr ? rt.remove(comm) : nullptr;
  if (c == nullptr) return false;
  c->abort();
  rt.write_stats(*c);
  return true;
}

}  // namespace sketchccl::interpose
