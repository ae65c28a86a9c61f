#include "src/coll/agreement.h"

#include <cstring>

#include "src/coll/ring.h"

namespace sketchccl::coll {

bool same_decision(const DecisionMessage& a, const DecisionMessage& b) {
  return a.speculative == b.speculative && a.reserved == b.reserved &&
         std::memcmp(a.inputs, b.inputs, sizeof a.inputs) == 0;
}

Status allgather_direct(const CommLink& link, const void* mine, size_t bytes, void* all,
                        const char* what) {
  SCCL_RETURN_IF_ERROR(check_link(link, what));
  auto* out = static_cast<uint8_t*>(all);
  const int p = link.nranks, r = link.rank;
  std::memcpy(out + static_cast<size_t>(r) * bytes, mine, bytes);
  if (p == 1 || bytes == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(connect_all(link));
  const uint64_t tag = ring_tag(link.op_seq, link.phase, 0, 0);
  Exchange ex(link, what);
  // Every receive first (nearest peer before), then every send, as the peers expect them.
  for (int d = 1; d < p; ++d) {
    const int q = (r + p - d) % p;
    SCCL_RETURN_IF_ERROR(ex.recv(q, tag, out + static_cast<size_t>(q) * bytes, bytes));
  }
  for (int d = 1; d < p; ++d)
    SCCL_RETURN_IF_ERROR(ex.send((r + d) % p, tag, mine, bytes));
  return ex.wait_all();
}

}  // namespace sketchccl::coll
