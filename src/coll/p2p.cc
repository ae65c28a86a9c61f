#include "src/coll/p2p.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "src/coll/ring.h"

namespace sketchccl::coll {

Status connect_peer(const PeerLink& link, int peer) {
  if (peer == link.rank) return Status::Ok();
  if (link.transport == nullptr || link.addresses == nullptr ||
      static_cast<size_t>(peer) >= link.addresses->size()) {
    return errorf(Code::kInternalError, "rank %d has no address for rank %d", link.rank, peer);
  }
  return link.transport->connect(peer, (*link.addresses)[static_cast<size_t>(peer)]);
}

uint64_t op_tag(uint8_t phase, uint32_t seq, int step) {
  return ring_tag(seq, phase, step, 0);
}

Transfers::~Transfers() {
  // Still pending (an early return): close, so no receive writes into freed memory later.
  if (!pending_.empty() && link_.transport != nullptr) link_.transport->close();
}

Status Transfers::fail(Status st) {
  if (link_.transport != nullptr) link_.transport->close();
  pending_.clear();
  return st;
}

Status Transfers::send(int peer, uint64_t tag_base, const void* buf, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t piece = 0, off = 0;
  do {
    const size_t n = std::min(kPieceBytes, bytes - off);
    transport::RequestId id = 0;
    Status st = link_.transport->isend(peer, tag_base + piece, p + off, n, &id);
    if (!st.ok()) return fail(st);
    pending_.push_back({id, peer, SIZE_MAX});
    off += n;
    ++piece;
  } while (off < bytes);
  return Status::Ok();
}

Status Transfers::recv(int peer, uint64_t tag_base, void* buf, size_t bytes) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t piece = 0, off = 0;
  do {
    const size_t n = std::min(kPieceBytes, bytes - off);
    transport::RequestId id = 0;
    Status st = link_.transport->irecv(peer, tag_base + piece, p + off, n, &id);
    if (!st.ok()) return fail(st);
    pending_.push_back({id, peer, n});
    off += n;
    ++piece;
  } while (off < bytes);
  return Status::Ok();
}

Status Transfers::wait() {
  auto start = std::chrono::steady_clock::now();
  int idle = 0;
  while (!pending_.empty()) {
    if (link_.abort != nullptr && link_.abort->load()) {
      return fail(Status(Code::kRemoteError, "communicator aborted"));
    }
    Status st = link_.transport->progress();
    if (!st.ok()) return fail(st);
    bool any = false;
    for (size_t i = 0; i < pending_.size();) {
      bool done = false;
      size_t got = 0;
      st = link_.transport->test(pending_[i].id, &done, &got);
      if (!st.ok()) return fail(st);
      if (!done) {
        ++i;
        continue;
      }
      if (pending_[i].expect != SIZE_MAX && got != pending_[i].expect) {
        return fail(errorf(Code::kInvalidUsage,
                           "rank %d received %zu bytes from rank %d where %zu were expected (the "
                           "ranks disagree on the count or the datatype)",
                           link_.rank, got, pending_[i].peer, pending_[i].expect));
      }
      pending_[i] = pending_.back();
      pending_.pop_back();
      any = true;
    }
    if (any) {
      start = std::chrono::steady_clock::now();  // the timeout bounds a wait without progress
      idle = 0;
      continue;
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > link_.timeout_s) {
      return fail(errorf(Code::kRemoteError,
                         "rank %d: a transfer did not complete within SKETCHCCL_TIMEOUT (%.0f s): "
                         "a peer is gone or did not make the matching call",
                         link_.rank, link_.timeout_s));
    }
    // Many ranks may share few cores (several ranks on one GPU): let them run, as the ring does.
    if (++idle > 4096) {
      usleep(50);
    } else if (idle > 256) {
      sched_yield();
    }
  }
  return Status::Ok();
}

}  // namespace sketchccl::coll
