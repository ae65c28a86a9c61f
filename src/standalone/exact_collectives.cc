#include "src/standalone/exact_collectives.h"

#include <cstdint>
#include <cstring>
#include <new>

#include "src/coll/ring_phase.h"

namespace sketchccl::standalone {
namespace {

using coll::connect_peer;
using coll::kPhaseExactColl;
using coll::kPhaseP2P;
using coll::kPieceBytes;
using coll::op_tag;
using coll::PeerLink;
using coll::Transfers;

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

// Scratch memory of an operation; a failed allocation is an error, not an exception.
Status alloc(std::vector<uint8_t>* v, size_t bytes) {
  try {
    v->resize(bytes);
  } catch (const std::bad_alloc&) {
    return errorf(Code::kSystemError, "cannot allocate %zu bytes of scratch memory", bytes);
  }
  return Status::Ok();
}

// What an exact collective's transfers are called in errors.
constexpr const char* kExactWhat = "the exact collective";

// Tag steps of one collective: ring steps first, then the gathers and the broadcast.
constexpr int kStepDirect = 0;

class Exact {
 public:
  Exact(const PeerLink& link, const ExactArgs& a)
      : link_(link), a_(a), p_(link.nranks), r_(link.rank), esz_(dtype_size(a.type)) {}

  Status run() {
    switch (a_.kind) {
      case ExactKind::kAllReduce:
        return all_reduce();
      case ExactKind::kReduce:
        return reduce();
      case ExactKind::kBroadcast:
        return broadcast();
      case ExactKind::kReduceScatter:
        return reduce_scatter();
      case ExactKind::kAllGather:
        return all_gather(a_.send, a_.recv, a_.count);
      case ExactKind::kAlltoAll:
        return all_to_all();
      case ExactKind::kGather:
        return gather();
      case ExactKind::kScatter:
        return scatter();
    }
    return Status(Code::kInternalError, "unknown collective");
  }

 private:
  uint64_t tag(int step) const { return op_tag(kPhaseExactColl, link_.op_seq, step); }
  int right() const { return (r_ + 1) % p_; }
  int left() const { return (r_ - 1 + p_) % p_; }
  size_t chunk_first(size_t count, int c) const {
    return count / static_cast<size_t>(p_) * static_cast<size_t>(c) +
           std::min(static_cast<size_t>(c), count % static_cast<size_t>(p_));
  }
  size_t chunk_len(size_t count, int c) const {
    return chunk_first(count, c + 1) - chunk_first(count, c);
  }
  const uint8_t* send_at(size_t elem) const {
    return static_cast<const uint8_t*>(a_.send) + elem * esz_;
  }
  uint8_t* recv_at(size_t elem) const { return static_cast<uint8_t*>(a_.recv) + elem * esz_; }

  // One ring step: `out` to the right neighbour and `in` from the left, both waited for.
  Status exchange(int step, const void* out, size_t out_bytes, void* in, size_t in_bytes) {
    Transfers t(link_, kExactWhat);
    if (in_bytes > 0) SCCL_RETURN_IF_ERROR(t.recv(left(), tag(step), in, in_bytes));
    if (out_bytes > 0) SCCL_RETURN_IF_ERROR(t.send(right(), tag(step), out, out_bytes));
    return t.wait();
  }

  // Ring reduce-scatter of `count` elements cut into P chunks (sizes differ by at most one): after
  // P - 1 steps acc_ holds, at chunk r, the reduction of every rank's chunk r (other chunks hold
  // partial results). Chunk c is reduced in rank order c + 1, c + 2, ..., c.
  Status ring_reduce(size_t count) {
    const size_t asz = acc_size(a_.type);
    SCCL_RETURN_IF_ERROR(alloc(&acc_, count * asz));
    auto acc_at = [&](int c) { return acc_.data() + chunk_first(count, c) * asz; };
    if (p_ == 1) {
      acc_load(a_.type, a_.op, a_.send, count, acc_.data());
      return Status::Ok();
    }
    const int first = mod(r_ - 1, p_);
    acc_load(a_.type, a_.op, send_at(chunk_first(count, first)), chunk_len(count, first),
             acc_at(first));
    for (int s = 0; s < p_ - 1; ++s) {
      const int out = mod(r_ - s - 1, p_), in = mod(r_ - s - 2, p_);
      SCCL_RETURN_IF_ERROR(exchange(s, acc_at(out), chunk_len(count, out) * asz, acc_at(in),
                                    chunk_len(count, in) * asz));
      acc_combine(a_.type, a_.op, acc_at(in), send_at(chunk_first(count, in)),
                  chunk_len(count, in));
    }
    return Status::Ok();
  }

  // Ring all-gather over `buf` cut like ring_reduce's chunks (every rank holds chunk r).
  Status ring_gather(uint8_t* buf, size_t count, size_t elem_bytes, int first_step) {
    for (int s = 0; s < p_ - 1; ++s) {
      const int out = mod(r_ - s, p_), in = mod(r_ - s - 1, p_);
      SCCL_RETURN_IF_ERROR(exchange(first_step + s, buf + chunk_first(count, out) * elem_bytes,
                                    chunk_len(count, out) * elem_bytes,
                                    buf + chunk_first(count, in) * elem_bytes,
                                    chunk_len(count, in) * elem_bytes));
    }
    return Status::Ok();
  }

  Status all_reduce() {
    const size_t n = a_.count;
    SCCL_RETURN_IF_ERROR(ring_reduce(n));
    const size_t asz = acc_size(a_.type);
    acc_store(a_.type, a_.op, p_, acc_.data() + chunk_first(n, r_) * asz, chunk_len(n, r_),
              recv_at(chunk_first(n, r_)));
    return ring_gather(static_cast<uint8_t*>(a_.recv), n, esz_, p_);
  }

  Status reduce_scatter() {
    const size_t n = a_.count * static_cast<size_t>(p_);
    SCCL_RETURN_IF_ERROR(ring_reduce(n));
    const size_t asz = acc_size(a_.type);
    acc_store(a_.type, a_.op, p_, acc_.data() + chunk_first(n, r_) * asz, a_.count, a_.recv);
    return Status::Ok();
  }

  // The reduce-scatter, then every chunk to the root.
  Status reduce() {
    const size_t n = a_.count;
    SCCL_RETURN_IF_ERROR(ring_reduce(n));
    const size_t asz = acc_size(a_.type);
    const size_t mine = chunk_len(n, r_);
    if (r_ != a_.root) {
      std::vector<uint8_t> out;
      SCCL_RETURN_IF_ERROR(alloc(&out, mine * esz_));
      acc_store(a_.type, a_.op, p_, acc_.data() + chunk_first(n, r_) * asz, mine, out.data());
      if (mine == 0) return Status::Ok();
      SCCL_RETURN_IF_ERROR(connect_peer(link_, a_.root));
      Transfers t(link_, kExactWhat);
      SCCL_RETURN_IF_ERROR(t.send(a_.root, tag(p_), out.data(), out.size()));
      return t.wait();
    }
    acc_store(a_.type, a_.op, p_, acc_.data() + chunk_first(n, r_) * asz, mine,
              recv_at(chunk_first(n, r_)));
    Transfers t(link_, kExactWhat);
    for (int q = 0; q < p_; ++q) {
      if (q == r_ || chunk_len(n, q) == 0) continue;
      SCCL_RETURN_IF_ERROR(connect_peer(link_, q));
      SCCL_RETURN_IF_ERROR(t.recv(q, tag(p_), recv_at(chunk_first(n, q)), chunk_len(n, q) * esz_));
    }
    return t.wait();
  }

  // A chain root, root + 1, ..., root - 1, piece by piece: a rank forwards a piece as soon as it
  // has it.
  Status broadcast() {
    const size_t bytes = a_.count * esz_;
    auto* buf = static_cast<uint8_t*>(a_.recv);
    const int pos = mod(r_ - a_.root, p_);
    if (pos == 0 && a_.send != a_.recv) std::memmove(buf, a_.send, bytes);
    if (p_ == 1 || bytes == 0) return Status::Ok();
    Transfers sends(link_, kExactWhat);
    const bool forwards = pos < p_ - 1;
    for (size_t off = 0, piece = 0; off < bytes; off += kPieceBytes, ++piece) {
      const size_t len = std::min(kPieceBytes, bytes - off);
      if (pos > 0) {
        Transfers in(link_, kExactWhat);
        SCCL_RETURN_IF_ERROR(in.recv(left(), tag(kStepDirect) + piece, buf + off, len));
        SCCL_RETURN_IF_ERROR(in.wait());
      }
      if (forwards)
        SCCL_RETURN_IF_ERROR(sends.send(right(), tag(kStepDirect) + piece, buf + off, len));
    }
    return sends.wait();
  }

  Status all_gather(const void* send, void* recv, size_t count) {
    auto* out = static_cast<uint8_t*>(recv);
    const size_t bytes = count * esz_;
    std::memmove(out + static_cast<size_t>(r_) * bytes, send, bytes);
    return ring_gather(out, count * static_cast<size_t>(p_), esz_, 0);
  }

  Status gather() {
    const size_t bytes = a_.count * esz_;
    if (bytes == 0) return Status::Ok();
    Transfers t(link_, kExactWhat);
    if (r_ != a_.root) {
      SCCL_RETURN_IF_ERROR(connect_peer(link_, a_.root));
      SCCL_RETURN_IF_ERROR(t.send(a_.root, tag(kStepDirect), a_.send, bytes));
      return t.wait();
    }
    std::memmove(recv_at(static_cast<size_t>(r_) * a_.count), a_.send, bytes);
    for (int q = 0; q < p_; ++q) {
      if (q == r_) continue;
      SCCL_RETURN_IF_ERROR(connect_peer(link_, q));
      SCCL_RETURN_IF_ERROR(
          t.recv(q, tag(kStepDirect), recv_at(static_cast<size_t>(q) * a_.count), bytes));
    }
    return t.wait();
  }

  Status scatter() {
    const size_t bytes = a_.count * esz_;
    if (bytes == 0) return Status::Ok();
    Transfers t(link_, kExactWhat);
    if (r_ != a_.root) {
      SCCL_RETURN_IF_ERROR(connect_peer(link_, a_.root));
      SCCL_RETURN_IF_ERROR(t.recv(a_.root, tag(kStepDirect), a_.recv, bytes));
      return t.wait();
    }
    for (int q = 0; q < p_; ++q) {
      if (q == r_) continue;
      SCCL_RETURN_IF_ERROR(connect_peer(link_, q));
      SCCL_RETURN_IF_ERROR(
          t.send(q, tag(kStepDirect), send_at(static_cast<size_t>(q) * a_.count), bytes));
    }
    std::memmove(a_.recv, send_at(static_cast<size_t>(r_) * a_.count), bytes);
    return t.wait();
  }

  Status all_to_all() {
    const size_t bytes = a_.count * esz_;
    const size_t total = bytes * static_cast<size_t>(p_);
    if (bytes == 0) return Status::Ok();
    // Overlapping buffers (in place): send from a copy.
    const auto* src = static_cast<const uint8_t*>(a_.send);
    const auto* dst = static_cast<const uint8_t*>(a_.recv);
    std::vector<uint8_t> copy;
    if (src < dst + total && dst < src + total) {
      SCCL_RETURN_IF_ERROR(alloc(&copy, total));
      std::memcpy(copy.data(), src, total);
      src = copy.data();
    }
    Transfers t(link_, kExactWhat);
    for (int q = 0; q < p_; ++q) {
      if (q == r_) continue;
      SCCL_RETURN_IF_ERROR(connect_peer(link_, q));
      SCCL_RETURN_IF_ERROR(
          t.recv(q, tag(kStepDirect), recv_at(static_cast<size_t>(q) * a_.count), bytes));
    }
    for (int q = 0; q < p_; ++q) {
      if (q == r_) continue;
      SCCL_RETURN_IF_ERROR(
          t.send(q, tag(kStepDirect), src + static_cast<size_t>(q) * bytes, bytes));
    }
    std::memmove(recv_at(static_cast<size_t>(r_) * a_.count), src + static_cast<size_t>(r_) * bytes,
                 bytes);
    return t.wait();
  }

  const PeerLink& link_;
  const ExactArgs& a_;
  const int p_, r_;
  const size_t esz_;
  std::vector<uint8_t> acc_;
};

}  // namespace

Status run_collective(const PeerLink& link, const ExactArgs& args) {
  if (link.nranks > 1 && link.transport == nullptr) {
    return Status(Code::kInternalError, "communicator has no transport");
  }
  if (args.root < 0 || args.root >= link.nranks) {
    return errorf(Code::kInvalidArgument, "root %d outside [0, %d)", args.root, link.nranks);
  }
  Exact e(link, args);
  return e.run();
}

Status run_p2p(const PeerLink& link, const std::vector<P2POp>& ops) {
  // A rank's own sends and receives pair up in order.
  std::vector<const P2POp*> self_sends, self_recvs;
  for (const P2POp& op : ops) {
    if (op.peer != link.rank) continue;
    (op.send ? self_sends : self_recvs).push_back(&op);
  }
  if (self_sends.size() != self_recvs.size()) {
    return errorf(Code::kInvalidUsage,
                  "rank %d: %zu sends to itself but %zu receives from itself in one group "
                  "(they must pair up inside the group)",
                  link.rank, self_sends.size(), self_recvs.size());
  }
  for (size_t k = 0; k < self_sends.size(); ++k) {
    if (self_sends[k]->bytes != self_recvs[k]->bytes) {
      return errorf(Code::kInvalidUsage,
                    "rank %d: a send to itself of %zu bytes meets a receive of %zu bytes",
                    link.rank, self_sends[k]->bytes, self_recvs[k]->bytes);
    }
    std::memmove(self_recvs[k]->buf, self_sends[k]->buf, self_sends[k]->bytes);
  }
  if (link.nranks == 1) return Status::Ok();
  Transfers t(link);
  // Receives first, so that a peer's data finds them posted.
  for (int pass = 0; pass < 2; ++pass) {
    for (const P2POp& op : ops) {
      if (op.peer == link.rank || op.send != (pass == 1)) continue;
      SCCL_RETURN_IF_ERROR(connect_peer(link, op.peer));
      std::vector<uint32_t>& seq = *(op.send ? link.sent : link.received);
      const uint64_t tag = op_tag(kPhaseP2P, seq[static_cast<size_t>(op.peer)]++, 0);
      if (op.send) {
        SCCL_RETURN_IF_ERROR(t.send(op.peer, tag, op.buf, op.bytes));
      } else {
        SCCL_RETURN_IF_ERROR(t.recv(op.peer, tag, op.buf, op.bytes));
      }
    }
  }
  return t.wait();
}

}  // namespace sketchccl::standalone
