// NCCL's argument rules for the exact collectives of standalone mode, and their submission.
#include "src/interpose/standalone_exact.h"

#include <cstdint>

#include "src/backend/cuda_query.h"
#include "src/interpose/group.h"
#include "src/interpose/last_error.h"
#include "src/interpose/runtime.h"
#include "src/interpose/standalone_stage.h"

namespace sketchccl::interpose {
namespace {

using coll::CollKind;

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

Extents extents_of(const coll::CollArgs& a, int rank, int nranks) {
  const size_t esz = coll::dtype_size(a.type);
  const size_t n = a.count * esz, all = n * static_cast<size_t>(nranks);
  const bool root = rank == a.root;
  auto* recv = static_cast<uint8_t*>(a.recv);
  Extents e;
  switch (a.kind) {
    case CollKind::kAllReduce:
      e = {a.send, n, a.recv, n, a.recv};
      break;
    case CollKind::kReduce:
      e = {a.send, n, root ? a.recv : nullptr, root ? n : 0, a.recv};
      break;
    case CollKind::kBroadcast:
      e = {root ? a.send : nullptr, root ? n : 0, a.recv, n, a.recv};
      break;
    case CollKind::kReduceScatter:
      e = {a.send, all, a.recv, n, nullptr};
      // In place: recvbuff is this rank's chunk of sendbuff.
      if (a.send != nullptr) {
        const auto* s = static_cast<const uint8_t*>(a.send);
        if (a.recv == s + static_cast<size_t>(rank) * n) e.in_place_send = a.send;
      }
      break;
    case CollKind::kAllGather:
      e = {a.send, n, a.recv, all,
           recv == nullptr ? nullptr : recv + static_cast<size_t>(rank) * n};
      break;
    case CollKind::kAlltoAll:
      e = {a.send, all, a.recv, all, a.recv};
      break;
    case CollKind::kGather:
      e = {a.send, n, root ? a.recv : nullptr, root ? all : 0,
           recv == nullptr ? nullptr : recv + static_cast<size_t>(rank) * n};
      break;
    case CollKind::kScatter:
      e = {root ? a.send : nullptr, root ? all : 0, a.recv, n, nullptr};
      if (root && a.send != nullptr) {
        const auto* s = static_cast<const uint8_t*>(a.send);
        if (a.recv == s + static_cast<size_t>(rank) * n) e.in_place_send = a.send;
      }
      break;
  }
  return e;
}

Status check_buffers(const coll::CollArgs& a, int rank, int nranks, bool* device) {
  const size_t esz = coll::dtype_size(a.type);
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
      !(a.kind == CollKind::kAlltoAll && e.send == e.recv)) {
    return Status(Code::kInvalidArgument,
                  "sendbuff and recvbuff overlap without being NCCL's in-place layout");
  }
  return Status::Ok();
}

}  // namespace

Status exact_type(ncclDataType_t t, coll::DType* out) {
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= coll::kNumDTypes) {
    return errorf(Code::kInvalidArgument, "datatype %d is not an ncclDataType_t",
                  static_cast<int>(t));
  }
  *out = static_cast<coll::DType>(t);
  return Status::Ok();
}

Status check_one_buffer(const void* buf, size_t count, coll::DType t, bool* device) {
  if (count > SIZE_MAX / coll::dtype_size(t)) {
    return errorf(Code::kInvalidArgument, "count %zu overflows", count);
  }
  *device = false;
  if (count == 0) return Status::Ok();
  if (buf == nullptr) return Status(Code::kInvalidArgument, "the buffer is NULL");
  *device = backend::has_cuda_backend() && backend::is_device_pointer(buf);
  return Status::Ok();
}

bool compressed_eligible(ncclDataType_t t, ncclRedOp_t op) {
  return (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16) &&
         (op == ncclSum || op == ncclAvg);
}

ncclResult_t run_exact(ncclComm_t comm, const coll::CollArgs& args, cudaStream_t stream,
                       const char* api) {
  auto c = Runtime::get().find(comm);
  if (c == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), api);
  }
  if (args.root < 0 || args.root >= c->nranks()) {
    return report(errorf(Code::kInvalidArgument, "root %d outside [0, %d)", args.root, c->nranks()),
                  api);
  }
  bool device = false;
  Status st = check_buffers(args, c->rank(), c->nranks(), &device);
  if (!st.ok()) return report(st, api);
  // Device buffers: staged through host copies (standalone_stage.h), the stream drained first.
  std::shared_ptr<StagedBuffers> staged;
  coll::CollArgs run = args;
  if (device) {
    if (backend::stream_is_capturing(stream)) {
      return report(Status(Code::kInvalidUsage,
                           "a stream being captured into a CUDA graph: standalone mode's exact "
                           "calls cannot be captured"),
                    api);
    }
    const Extents e = extents_of(args, c->rank(), c->nranks());
    st = StagedBuffers::stage(e.send, e.send_bytes, e.recv, e.recv_bytes, stream, &staged);
    if (!st.ok()) return report(st, api);
    if (e.send_bytes > 0) run.send = staged->host_send();
    if (e.recv_bytes > 0) run.recv = staged->host_recv();
  }
  auto work = c->submit_exact(
      [run, staged](const coll::PeerLink& link) { return coll::run_collective(link, run); },
      /*collective=*/true);
  if (group::active()) {
    group::defer(work, false, [staged, api](const Status& done) {
      if (staged && done.ok()) (void)report(staged->unstage(), api);
    });
    return ncclSuccess;
  }
  st = work->wait();
  if (st.ok() && staged) st = staged->unstage();
  return report(st, api);
}

ncclResult_t exact_call(coll::CollKind kind, const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream, const char* api) {
  if (Runtime::get().find(comm) == nullptr) {
    return report(Status(Code::kInvalidArgument, "comm is not a live communicator"), api);
  }
  coll::CollArgs a;
  a.kind = kind;
  a.send = sendbuff;
  a.recv = recvbuff;
  a.count = count;
  a.root = root;
  Status st = exact_type(datatype, &a.type);
  if (!st.ok()) return report(st, api);
  const bool reduces = kind == coll::CollKind::kAllReduce || kind == coll::CollKind::kReduce ||
                       kind == coll::CollKind::kReduceScatter;
  if (reduces) {
    st = exact_op(comm, op, datatype, &a.op);
    if (!st.ok()) return report(st, api);
  }
  return run_exact(comm, a, stream, api);
}

}  // namespace sketchccl::interpose
