#include "src/coll/agreement.h"

#include <cstring>

#include "src/coll/ring.h"

namespace sketchccl::coll {

bool same_decision(const DecisionMessage& a, const DecisionMessage& b) {
  return a.speculative == b.speculative && a.reserved == b.reserved &&
         std::memcmp(a.inputs, b.inputs, sizeof a.inputs) == 0;
}

Status DecisionHeader::start(Exchange& ex, TransferNote note) {
  const CommLink& link = ex.link();
  theirs_.assign(static_cast<size_t>(link.nranks), DecisionMessage{});
  note.phase = spec_.phase;
  const uint64_t tag = ring_tag(link.op_seq, spec_.phase, 0, 0);
  for (int q = 0; q < link.nranks; ++q) {
    if (q != link.rank)
      SCCL_RETURN_IF_ERROR(
          ex.recv(q, tag, &theirs_[static_cast<size_t>(q)], sizeof(DecisionMessage), note));
  }
  for (int q = 0; q < link.nranks; ++q) {
    if (q != link.rank)
      SCCL_RETURN_IF_ERROR(ex.send(q, tag, &spec_.mine, sizeof(DecisionMessage), note));
  }
  left_ = link.nranks - 1;
  return Status::Ok();
}

DecisionHeader::Peer DecisionHeader::take(int q) {
  const DecisionMessage& d = theirs_[static_cast<size_t>(q)];
  --left_;
  if (same_decision(d, spec_.mine)) return Peer::kTake;
  disagreed_ = true;
  return d.speculative != 0 ? Peer::kDrop : Peer::kNone;
}

Status Drops::post(Exchange& ex, int peer, uint64_t tag, size_t bound, TransferNote note) {
  bufs_.emplace_back(new uint8_t[bound]);
  return ex.recv(peer, tag, bufs_.back().get(), bound, note, /*exact=*/false);
}

Status decision_round(const CommLink& link, const DecisionMessage& mine, Agreement* out) {
  std::vector<DecisionMessage> all(static_cast<size_t>(link.nranks));
  // One message round (each rank's inputs straight to every other), not P - 1 ring steps.
  SCCL_RETURN_IF_ERROR(allgather_direct(link, &mine, sizeof mine, all.data()));
  *out = Agreement{};
  for (int q = 0; q < link.nranks; ++q) {
    const DecisionMessage& d = all[static_cast<size_t>(q)];
    if (!same_decision(d, all.front())) out->agreed = false;
    if (q != link.rank && d.speculative != 0) out->speculated.push_back(q);
  }
  return Status::Ok();
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
