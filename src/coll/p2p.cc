#include "src/coll/p2p.h"

#include <algorithm>
#include <cstdint>

#include "src/coll/ring.h"

namespace sketchccl::coll {

uint64_t op_tag(uint8_t phase, uint32_t seq, int step) {
  return ring_tag(seq, phase, step, 0);
}

Status Transfers::closed_on_failure(const Status& st) {
  if (!st.ok()) ex_.fail();
  return st;
}

Status Transfers::send(int peer, uint64_t tag_base, const void* buf, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t piece = 0, off = 0;
  do {
    const size_t n = std::min(kPieceBytes, bytes - off);
    SCCL_RETURN_IF_ERROR(closed_on_failure(ex_.send(peer, tag_base + piece, p + off, n)));
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
    SCCL_RETURN_IF_ERROR(closed_on_failure(ex_.recv(peer, tag_base + piece, p + off, n)));
    off += n;
    ++piece;
  } while (off < bytes);
  return Status::Ok();
}

Status Transfers::wait() {
  // The clock starts at the wait: what the caller did since posting is not a stalled transfer.
  ex_.progressed();
  return closed_on_failure(ex_.wait_all());
}

}  // namespace sketchccl::coll
