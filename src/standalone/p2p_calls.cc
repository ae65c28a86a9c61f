#include "src/standalone/p2p_calls.h"

#include <map>
#include <vector>

#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/standalone/exact_calls.h"
#include "src/standalone/staging.h"

namespace sketchccl::standalone {
namespace {

// This thread's open group: its sends and receives per communicator, in call order.
struct PendingP2P {
  std::map<ncclComm_t, std::vector<P2POp>> ops;
  // Device buffers' host copies per communicator (receives go back after the group).
  std::map<ncclComm_t, std::vector<std::shared_ptr<StagedBuffers>>> staged;
  std::vector<ncclComm_t> order;  // communicators in the order of their first call
};

using StagedList = std::vector<std::shared_ptr<StagedBuffers>>;

Status unstage_all(const StagedList& staged) {
  Status first = Status::Ok();
  for (const auto& s : staged) {
    Status st = s->unstage();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

PendingP2P& pending() {
  thread_local PendingP2P p;
  return p;
}

std::shared_ptr<coll::Work> submit(coll::Communicator& c, std::vector<P2POp> ops) {
  return c.submit_exact(
      [ops = std::move(ops)](const coll::PeerLink& link) { return run_p2p(link, ops); },
      /*collective=*/false);
}

void submit_group() {
  PendingP2P& p = pending();
  for (ncclComm_t handle : p.order) {
    auto c = api::Runtime::get().find(handle);
    std::vector<P2POp> ops = std::move(p.ops[handle]);
    StagedList staged = std::move(p.staged[handle]);
    if (c == nullptr) {
      api::group::defer(std::make_shared<coll::Work>([] {
                          return Status(Code::kInvalidArgument,
                                        "a communicator of the group's sends and receives is gone");
                        }),
                        false);
      continue;
    }
    api::group::defer(submit(*c, std::move(ops)), false, [staged](const Status& done) {
      if (done.ok()) (void)api::report(unstage_all(staged), "ncclGroupEnd");
    });
  }
  p.ops.clear();
  p.staged.clear();
  p.order.clear();
}

}  // namespace

ncclResult_t p2p_call(const api::CollCall& call) {
  const bool is_send = call.kind == api::CollKind::kSend;
  void* buf = is_send ? const_cast<void*>(call.send) : call.recv;
  const size_t count = call.count;
  const ncclDataType_t datatype = call.type;
  const int peer = call.root;
  const ncclComm_t comm = call.comm;
  const cudaStream_t stream = call.stream;
  const char* fn = call.api;
  auto c = api::Runtime::get().find(comm);
  if (c == nullptr) {
    return api::report(Status(Code::kInvalidArgument, "comm is not a live communicator"), fn);
  }
  DType t{};
  Status st = exact_type(datatype, &t);
  if (!st.ok()) return api::report(st, fn);
  if (peer < 0 || peer >= c->nranks()) {
    return api::report(errorf(Code::kInvalidArgument, "peer %d outside [0, %d)", peer, c->nranks()),
                       fn);
  }
  bool device = false;
  st = check_one_buffer(buf, count, t, &device);
  if (!st.ok()) return api::report(st, fn);
  P2POp op;
  op.send = is_send;
  op.peer = peer;
  op.buf = buf;
  op.bytes = count * dtype_size(t);
  // Device buffers: staged through host copies (staging.h).
  StagedList staged;
  if (device) {
    std::shared_ptr<StagedBuffers> sb;
    st = is_send ? StagedBuffers::stage(buf, op.bytes, nullptr, 0, stream, &sb)
                 : StagedBuffers::stage(nullptr, 0, buf, op.bytes, stream, &sb);
    if (!st.ok()) return api::report(st, fn);
    op.buf = is_send ? sb->host_send() : sb->host_recv();
    staged.push_back(std::move(sb));
  }
  if (!api::group::active()) {
    std::vector<P2POp> one{op};
    st = submit(*c, std::move(one))->wait();
    if (st.ok()) st = unstage_all(staged);
    return api::report(st, fn);
  }
  PendingP2P& p = pending();
  auto it = p.ops.find(comm);
  if (it == p.ops.end()) {
    if (p.order.empty()) {
      api::group::defer_call({[] {
                                submit_group();
                                return Status::Ok();
                              },
                              {}});
    }
    p.order.push_back(comm);
    it = p.ops.emplace(comm, std::vector<P2POp>{}).first;
  }
  it->second.push_back(op);
  for (auto& sb : staged)
    p.staged[comm].push_back(std::move(sb));
  return ncclSuccess;
}

}  // namespace sketchccl::standalone
