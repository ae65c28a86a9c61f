// ncclSend/ncclRecv in standalone mode. Outside a group a call runs alone; inside one, each
// communicator's sends and receives are collected and submitted together at the outermost
// ncclGroupEnd (after the group's collectives), so that exchanges between ranks cannot deadlock.
#include <map>
#include <vector>

#include "src/interpose/group.h"
#include "src/interpose/last_error.h"
#include "src/interpose/runtime.h"
#include "src/interpose/standalone_exact.h"
#include "src/interpose/standalone_front.h"
#include "src/interpose/standalone_stage.h"

namespace sketchccl::interpose {
namespace {

// This thread's open group: its sends and receives per communicator, in call order.
struct PendingP2P {
  std::map<ncclComm_t, std::vector<coll::P2POp>> ops;
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

std::shared_ptr<coll::Work> submit(coll::Communicator& c, std::vector<coll::P2POp> ops) {
  return c.submit_exact(
      [ops = std::move(ops)](const coll::PeerLink& link) { return coll::run_p2p(link, ops); },
      /*collective=*/false);
}

void submit_group() {
  PendingP2P& p = pending();
  for (ncclComm_t handle : p.order) {
    auto c = Runtime::get().find(handle);
    std::vector<coll::P2POp> ops = std::move(p.ops[handle]);
    StagedList staged = std::move(p.staged[handle]);
    if (c == nullptr) {
      group::defer(std::make_shared<coll::Work>([] {
                     return Status(Code::kInvalidArgument,
                                   "a communicator of the group's sends and receives is gone");
                   }),
                   false);
      continue;
    }
    group::defer(submit(*c, std::move(ops)), false, [staged](const Status& done) {
      if (done.ok()) (void)report(unstage_all(staged), "ncclGroupEnd");
    });
  }
  p.ops.clear();
  p.staged.clear();
  p.order.clear();
}

ncclResult_t p2p_call(bool is_send, void* buf, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream, const char* api) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), api);
  }
  coll::DType t{};
  Status st = exact_type(datatype, &t);
  if (!st.ok()) return report(st, api);
  if (peer < 0 || peer >= c->nranks()) {
    return report(errorf(Code::kInvalidArgument, "peer %d outside [0, %d)", peer, c->nranks()),
                  api);
  }
  bool device = false;
  st = check_one_buffer(buf, count, t, &device);
  if (!st.ok()) return report(st, api);
  coll::P2POp op;
  op.send = is_send;
  op.peer = peer;
  op.buf = buf;
  op.bytes = count * coll::dtype_size(t);
  // Device buffers: staged through host copies (standalone_stage.h).
  StagedList staged;
  if (device) {
    std::shared_ptr<StagedBuffers> sb;
    st = is_send ? StagedBuffers::stage(buf, op.bytes, nullptr, 0, stream, &sb)
                 : StagedBuffers::stage(nullptr, 0, buf, op.bytes, stream, &sb);
    if (!st.ok()) return report(st, api);
    op.buf = is_send ? sb->host_send() : sb->host_recv();
    staged.push_back(std::move(sb));
  }
  if (!group::active()) {
    std::vector<coll::P2POp> one{op};
    st = submit(*c, std::move(one))->wait();
    if (st.ok()) st = unstage_all(staged);
    return report(st, api);
  }
  PendingP2P& p = pending();
  auto it = p.ops.find(comm);
  if (it == p.ops.end()) {
    if (p.order.empty()) {
      group::defer_call({[] {
                           submit_group();
                           return Status::Ok();
                         },
                         {}});
    }
    p.order.push_back(comm);
    it = p.ops.emplace(comm, std::vector<coll::P2POp>{}).first;
  }
  it->second.push_back(op);
  for (auto& sb : staged)
    p.staged[comm].push_back(std::move(sb));
  return ncclSuccess;
}

}  // namespace

ncclResult_t StandaloneFront::send(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                   int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p_call(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream,
                  "ncclSend");
}

ncclResult_t StandaloneFront::recv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return p2p_call(false, recvbuff, count, datatype, peer, comm, stream, "ncclRecv");
}

}  // namespace sketchccl::interpose
