#include "src/coll/exchange.h"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

namespace sketchccl::coll {
namespace {

using Clock = std::chrono::steady_clock;
// Longest single sleep in the transport (SKETCHCCL_WAIT=block): how late an abort, a timeout or
// local work finished elsewhere can be noticed.
constexpr double kBlockingWaitS = 0.002;
// Passes that moved nothing before the wait yields the core, and before it sleeps.
constexpr int kSpinPasses = 256, kYieldPasses = 4096;
constexpr useconds_t kSleepUs = 50;

}  // namespace

Status connect_peer(const CommLink& link, int peer) {
  if (peer == link.rank || link.addresses == nullptr) return Status::Ok();
  if (link.transport == nullptr || peer < 0 ||
      static_cast<size_t>(peer) >= link.addresses->size()) {
    return errorf(Code::kInternalError, "rank %d has no address for rank %d", link.rank, peer);
  }
  return link.transport->connect(peer, (*link.addresses)[static_cast<size_t>(peer)]);
}

Status connect_all(const CommLink& link) {
  for (int q = 0; q < link.nranks; ++q)
    SCCL_RETURN_IF_ERROR(connect_peer(link, q));
  return Status::Ok();
}

Status check_link(const CommLink& link, const char* what) {
  if (link.nranks < 1 || link.rank < 0 || link.rank >= link.nranks) {
    return errorf(Code::kInternalError, "%s: rank %d of %d", what, link.rank, link.nranks);
  }
  if (link.nranks > 1 && link.transport == nullptr) {
    return errorf(Code::kInternalError, "%s: no transport", what);
  }
  return Status::Ok();
}

Exchange::Exchange(const CommLink& link, const char* what)
    : link_(link), what_(what), last_progress_(Clock::now()) {}

Exchange::~Exchange() {
  if (!pending_.empty()) fail();
}

Status Exchange::send(int peer, uint64_t tag, const void* buf, size_t bytes, TransferNote note) {
  Pending pd;
  pd.peer = peer;
  pd.bytes = bytes;
  pd.note = note;
  Status st = link_.transport->isend(peer, tag, buf, bytes, &pd.id);
  if (!st.ok()) return annotate(st, "a send", note);
  pending_.push_back(pd);
  bytes_sent_ += bytes;
  return Status::Ok();
}

Status Exchange::recv(int peer, uint64_t tag, void* buf, size_t bytes, TransferNote note,
                      bool exact) {
  Pending pd;
  pd.peer = peer;
  pd.recv = true;
  pd.exact = exact;
  pd.bytes = bytes;
  pd.note = note;
  Status st = link_.transport->irecv(peer, tag, buf, bytes, &pd.id);
  if (!st.ok()) return annotate(st, "a receive", note);
  pending_.push_back(pd);
  return Status::Ok();
}

Status Exchange::progress() {
  return link_.transport->progress();
}

Status Exchange::aborted() const {
  return annotate(Status(Code::kRemoteError, "operation aborted (ncclCommAbort)"), "a wait");
}

Status Exchange::poll(std::vector<Completion>* done) {
  if (link_.abort != nullptr && link_.abort->load(std::memory_order_relaxed)) return aborted();
  if (pending_.empty()) return Status::Ok();
  SCCL_RETURN_IF_ERROR(link_.transport->progress());
  for (size_t i = 0; i < pending_.size();) {
    const Pending pd = pending_[i];
    bool complete = false;
    size_t got = 0;
    Status st = link_.transport->test(pd.id, &complete, &got);
    if (!st.ok() || (complete && pd.recv && pd.exact && got != pd.bytes)) {
      return check(st, pd, got);
    }
    if (!complete) {
      ++i;
      continue;
    }
    pending_[i] = pending_.back();
    pending_.pop_back();
    if (pd.recv) bytes_received_ += got;
    progressed();
    if (done != nullptr) done->push_back(Completion{pd.recv, pd.peer, got, pd.note});
  }
  return Status::Ok();
}

Status Exchange::check(const Status& st, const Pending& pd, size_t got) const {
  char detail[96];
  std::snprintf(detail, sizeof detail, "%s rank %d", pd.recv ? "a receive from" : "a send to",
                pd.peer);
  if (st.ok()) {
    return annotate(errorf(Code::kInvalidUsage,
                           "rank %d received %zu bytes from rank %d, expected %zu: the ranks "
                           "disagree on the count, type or codec of this call",
                           link_.rank, got, pd.peer, pd.bytes),
                    detail, pd.note);
  }
  // A receive the transport truncated: the peer sent more than this call's message.
  if (pd.recv && st.code() == Code::kInvalidArgument) {
    return annotate(errorf(Code::kInvalidUsage,
                           "rank %d received more than %zu bytes from rank %d: the ranks disagree "
                           "on the count, type or codec of this call (%s)",
                           link_.rank, pd.bytes, pd.peer, st.message().c_str()),
                    detail, pd.note);
  }
  return annotate(st, detail, pd.note);
}

void Exchange::progressed() {
  last_progress_ = Clock::now();
  idle_ = 0;
}

Status Exchange::idle(bool local_work) {
  if (link_.abort != nullptr && link_.abort->load(std::memory_order_relaxed)) return aborted();
  if (std::chrono::duration<double>(Clock::now() - last_progress_).count() > link_.timeout_s) {
    return timeout_error();
  }
  if (!local_work && !pending_.empty() && link_.transport->can_block()) {
    // Only a peer can move this rank on: sleep in the transport until its bytes come.
    return link_.transport->wait_for_events(kBlockingWaitS);
  }
  if (++idle_ > kYieldPasses) {
    usleep(kSleepUs);
  } else if (idle_ > kSpinPasses) {
    sched_yield();
  }
  return Status::Ok();
}

Status Exchange::wait_all(std::vector<Completion>* done) {
  while (!pending_.empty()) {
    const size_t before = pending_.size();
    SCCL_RETURN_IF_ERROR(poll(done));
    if (pending_.size() == before) SCCL_RETURN_IF_ERROR(idle());
  }
  return Status::Ok();
}

Status Exchange::wait_local(const std::function<Status(bool*)>& test, const char* what) {
  progressed();
  for (;;) {
    bool finished = false;
    SCCL_RETURN_IF_ERROR(test(&finished));
    if (finished) return Status::Ok();
    if (link_.abort != nullptr && link_.abort->load(std::memory_order_relaxed)) return aborted();
    if (std::chrono::duration<double>(Clock::now() - last_progress_).count() > link_.timeout_s) {
      return annotate(errorf(Code::kRemoteError,
                             "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) waiting for %s",
                             link_.rank, link_.timeout_s, what),
                      "local work");
    }
    SCCL_RETURN_IF_ERROR(idle(true));
  }
}

void Exchange::fail() {
  if (link_.transport != nullptr) link_.transport->close();
  pending_.clear();
}

Status Exchange::timeout_error() const {
  if (pending_.empty()) {
    return annotate(errorf(Code::kRemoteError,
                           "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) waiting for its own "
                           "work",
                           link_.rank, link_.timeout_s),
                    "local work");
  }
  // A transfer still pending: its peer is the one this rank waits for.
  const Pending& pd = pending_.front();
  return annotate(
      errorf(Code::kRemoteError,
             "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) waiting for %s rank %d",
             link_.rank, link_.timeout_s, pd.recv ? "a packet from" : "the send to", pd.peer),
      pd.recv ? "a receive" : "a send", pd.note);
}

Status Exchange::annotate(const Status& st, const char* detail, const TransferNote& note) const {
  std::string where = " (rank " + std::to_string(link_.rank) + " of " +
                      std::to_string(link_.nranks) + ", " + what_ + ", " + detail;
  if (note.slice >= 0) where += ", slice " + std::to_string(note.slice);
  if (note.step >= 0) where += ", step " + std::to_string(note.step);
  const int phase = note.phase >= 0 ? note.phase : static_cast<int>(link_.phase);
  where += ", phase " + std::to_string(phase) + ")";
  return Status(st.code(), st.message() + where);
}

}  // namespace sketchccl::coll
