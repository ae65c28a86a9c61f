#include "src/standalone/staging.h"

#include <algorithm>
#include <new>

#include "src/backend/cuda_stage.h"

namespace sketchccl::standalone {
namespace {

Status alloc(std::vector<uint8_t>* v, size_t bytes) {
  try {
    v->resize(std::max<size_t>(bytes, 1));
  } catch (const std::bad_alloc&) {
    return errorf(Code::kSystemError, "cannot allocate %zu bytes of host staging memory", bytes);
  }
  return Status::Ok();
}

}  // namespace

Status StagedBuffers::stage(const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                            cudaStream_t stream, std::shared_ptr<StagedBuffers>* out) {
  auto s = std::make_shared<StagedBuffers>();
  s->recv_ = recv;
  s->recv_bytes_ = recv_bytes;
  s->stream_ = stream;
  const auto sp = reinterpret_cast<uintptr_t>(send), rp = reinterpret_cast<uintptr_t>(recv);
  const bool overlap =
      send_bytes > 0 && recv_bytes > 0 && sp < rp + recv_bytes && rp < sp + send_bytes;
  if (overlap) {
    const uintptr_t lo = std::min(sp, rp), hi = std::max(sp + send_bytes, rp + recv_bytes);
    SCCL_RETURN_IF_ERROR(alloc(&s->a_, hi - lo));
    SCCL_RETURN_IF_ERROR(
        backend::stage_to_host(s->a_.data(), reinterpret_cast<const void*>(lo), hi - lo, stream));
    s->host_send_ = s->a_.data() + (sp - lo);
    s->host_recv_ = s->a_.data() + (rp - lo);
  } else {
    SCCL_RETURN_IF_ERROR(alloc(&s->a_, send_bytes));
    SCCL_RETURN_IF_ERROR(alloc(&s->b_, recv_bytes));
    // Drains the stream even with nothing to send: the receive must not overtake earlier work.
    SCCL_RETURN_IF_ERROR(backend::stage_to_host(s->a_.data(), send, send_bytes, stream));
    s->host_send_ = s->a_.data();
    s->host_recv_ = s->b_.data();
  }
  *out = std::move(s);
  return Status::Ok();
}

Status StagedBuffers::unstage() {
  if (recv_bytes_ == 0) return Status::Ok();
  return backend::stage_to_device(recv_, host_recv_, recv_bytes_, stream_);
}

}  // namespace sketchccl::standalone
