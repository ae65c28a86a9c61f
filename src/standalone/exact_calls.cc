#include "src/standalone/exact_calls.h"

#include <cstdint>

#include "src/api/group.h"
#include "src/api/last_error.h"
#include "src/api/runtime.h"
#include "src/backend/cuda_query.h"
#include "src/standalone/staging.h"

namespace sketchccl::standalone {
namespace {

using api::report;

// [p, p + bytes) and [q, q + bytes2) share a byte.
bool overlap(const void* p, size_t bytes, const void* q, size_t bytes2) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return bytes > 0 && bytes2 > 0 && a < b + bytes2 && b < a + bytes;
}

// The buffer extents a rank reads and writes, and where NCCL's in-place layout puts them.
struct Extents {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  const void* in_place_send = nullptr;  // the sendbuff that makes the call in place
};

Extents extents_of(const ExactArgs& a, int rank, int nranks) {
  const size_t esz = dtype_size(a.type);
  const size_t n = a.count * esz, all = n * static_cast<size_t>(nranks);
  const bool root = rank == a.root;
  auto* recv = static_cast<uint8_t*>(a.recv);
  Extents e;
  switch (a.kind) {
    case ExactKind::kAllReduce:
      e = {a.send, n, a.recv, n, a.recv};
      break;
    case ExactKind::kReduce:
      e = {a.send, n, root ? a.recv : nullptr, root ? n : 0, a.recv};
      break;
    case ExactKind::kBroadcast:
      e = {root ? a.send : nullptr, root ? n : 0, a.recv, n, a.recv};
      break;
    case ExactKind::kReduceScatter:
      e = {a.send, all, a.recv, n, nullptr};
      // In place: recvbuff is this rank's chunk of sendbuff.
      if (a.send != nullptr) {
        const auto* s = static_cast<const uint8_t*>(a.send);
        if (a.recv == s + static_cast<size_t>(rank) * n) e.in_place_send = a.send;
      }
      break;
    case ExactKind::kAllGather:
      e = {a.send, n, a.recv, all,
           recv == nullptr ? nullptr : recv + static_cast<size_t>(rank) * n};
      break;
    case ExactKind::kAlltoAll:
      e = {a.send, all, a.recv, all, a.recv};
      break;
    case ExactKind::kGather:
      e = {a.send, n, root ? a.recv : nullptr, root ? all : 0,
           recv == nullptr ? nullptr : recv + static_cast<size_t>(rank) * n};
      break;
    case ExactKind::kScatter:
      e = {root ? a.send : nullptr, root ? all : 0, a.recv, n, nullptr};
      if (root && a.send != nullptr) {
        const auto* s = static_cast<const uint8_t*>(a.send);
        if (a.recv == s + static_cast<size_t>(rank) * n) e.in_place_send = a.send;
      }
      break;
  }
  return e;
}

Status check_buffers(const ExactArgs& a, int rank, int nranks, bool* device) {
  const size_t esz = dtype_size(a.type);
  if (a.count > SIZE_MAX / esz / static_cast<size_t>(nranks)) {
    return errorf(Code::kInvalidArgument, "count %zu overflows", a.count);
  }
  const Extents e = extents_of(a, rank, nranks);
  if ((e.send_bytes > 0 && e.send == nullptr) || (e.recv_bytes > 0 && e.recv == nullptr)) {
    return Status(Code::kInvalidArgument, "sendbuff or recvbuff is NULL");
  }
  *device =
      backend::has_cuda_backend() && ((e.send_bytes > 0 && backend::is_device_pointer(e.send)) ||
                                      (e.recv_bytes > 0 && backend::is_device_pointer(e.recv)));
  if (overlap(e.send, e.send_bytes, e.recv, e.recv_bytes) && e.send != e.in_place_send &&
      !(a.kind == ExactKind::kAlltoAll && e.send == e.recv)) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff overlap without being NCCL's in-place layout");
  }
  return Status::Ok();
}

}  // namespace

Status exact_type(ncclDataType_t t, DType* out) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= kNumDTypes) {
    return errorf(Code::kInvalidArgument, "datatype %d is not an ncclDataType_t",
                  static_cast<int>(t));
  }
  *out = static_cast<DType>(t);
  return Status::Ok();
}

Status check_one_buffer(const void* buf, size_t count, DType t, bool* device) {
  if (count > SIZE_MAX / dtype_size(t)) {
    return errorf(Code::kInvalidArgument, "count %zu overflows", count);
  }
  *device = false;
  if (count == 0) return Status::Ok();
  if (buf == nullptr) return Status(Code::kInvalidArgument, "the buffer is NULL");
  *device = backend::has_cuda_backend() && backend::is_device_pointer(buf);
  return Status::Ok();
}

namespace {

// The exact engine's kind of a collective (ncclBcast is a Broadcast in place).
ExactKind exact_kind(api::CollKind kind) {
  switch (kind) {
    case api::CollKind::kAllReduce:
      return ExactKind::kAllReduce;
    case api::CollKind::kReduce:
      return ExactKind::kReduce;
    case api::CollKind::kBcast:
    case api::CollKind::kBroadcast:
      return ExactKind::kBroadcast;
    case api::CollKind::kReduceScatter:
      return ExactKind::kReduceScatter;
    case api::CollKind::kAllGather:
      return ExactKind::kAllGather;
    case api::CollKind::kAlltoAll:
      return ExactKind::kAlltoAll;
    case api::CollKind::kGather:
      return ExactKind::kGather;
    case api::CollKind::kScatter:
      return ExactKind::kScatter;
    case api::CollKind::kSend:
    case api::CollKind::kRecv:
      break;  // p2p_calls.cc
  }
  return ExactKind::kAllReduce;
}

// Runs a validated call (its type and op checked) on its communicator.
ncclResult_t run_exact(ncclComm_t comm, const ExactArgs& args, cudaStream_t stream,
                       const char* fn) {
  auto c = api::Runtime::get().find(comm);
  if (c == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), fn);
  }
  if (args.root < 0 || args.root >= c->nranks()) {
    return report(errorf(Code::kInvalidArgument, "root %d outside [0, %d)", args.root, c->nranks()),
                  fn);
  }
  bool device = false;
  Status st = check_buffers(args, c->rank(), c->nranks(), &device);
  if (!st.ok()) return report(st, fn);
  // Device buffers: staged through host copies (staging.h), the stream drained first.
  std::shared_ptr<StagedBuffers> staged;
  ExactArgs run = args;
  if (device) {
    if (backend::stream_is_capturing(stream)) {
      return report(Status(Code::kInvalidUsage,
                           "a stream being captured into a CUDA graph: standalone mode's exact "
                           "calls cannot be captured"),
                    fn);
    }
    const Extents e = extents_of(args, c->rank(), c->nranks());
    st = StagedBuffers::stage(e.send, e.send_bytes, e.recv, e.recv_bytes, stream, &staged);
    if (!st.ok()) return report(st, fn);
    if (e.send_bytes > 0) run.send = staged->host_send();
    if (e.recv_bytes > 0) run.recv = staged->host_recv();
  }
  auto work = c->submit_exact(
      [run, staged](const coll::PeerLink& link) { return run_collective(link, run); },
      /*collective=*/true);
  if (api::group::active()) {
    api::group::defer(work, false, [staged, fn](const Status& done) {
      if (staged && done.ok()) (void)report(staged->unstage(), fn);
    });
    return ncclSuccess;
  }
  st = work->wait();
  if (st.ok() && staged) st = staged->unstage();
  return report(st, fn);
}

}  // namespace

ncclResult_t exact_call(const api::CollCall& call) {
  const char* fn = call.api;
  if (api::Runtime::get().find(call.comm) == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), fn);
  }
  ExactArgs a;
  a.kind = exact_kind(call.kind);
  a.send = call.send;
  a.recv = call.recv;
  a.count = call.count;
  a.root = call.root;
  Status st = exact_type(call.type, &a.type);
  if (!st.ok()) return report(st, fn);
  if (api::reduces(call.kind)) {
    st = exact_op(call.comm, call.op, call.type, &a.op);
    if (!st.ok()) return report(st, fn);
  }
  return run_exact(call.comm, a, call.stream, fn);
}

}  // namespace sketchccl::standalone
