#include "src/coll/two_shot.h"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>

#include "src/coll/carry.h"

namespace sketchccl::coll {
namespace {

constexpr int kMaxSlices = (1 << 19) - 1;  // the tag's slice field

// A receive for a speculative contribution of another codec than this rank's: any quantizing
// codec's packet of n elements (at most its fp32 bytes plus headers) and the carried sample.
size_t drain_bytes(size_t n) {
  return 4 * n + 4096 + SampleTrailer::max_bytes(n);
}

// Receives, to drop, what peer q sent speculatively to this rank's chunk of `plan` (each slice's
// contribution, of any codec): in a speculative call whose decisions differ, or after a round.
Status post_drops(Drops& drops, Exchange& ex, const RingPlan& plan, uint8_t scatter_phase, int q,
                  TransferNote note) {
  const CommLink& link = ex.link();
  for (int j = 0; j < plan.slices(link.rank); ++j) {
    size_t off = 0, n = 0;
    plan.slice(link.rank, j, &off, &n);
    if (n == 0) continue;
    note.slice = j;
    note.phase = scatter_phase;
    SCCL_RETURN_IF_ERROR(
        drops.post(ex, q, ring_tag(link.op_seq, scatter_phase, 0, j), drain_bytes(n), note));
  }
  return Status::Ok();
}

// Packet memory from the SliceOps, one block for the whole call.
class Packets {
 public:
  explicit Packets(SliceOps& ops) : ops_(ops) {}
  Packets(const Packets&) = delete;
  Packets& operator=(const Packets&) = delete;
  ~Packets() {
    if (p_ != nullptr) ops_.free_packets(p_);
  }
  Status alloc(size_t bytes) {
    p_ = static_cast<uint8_t*>(ops_.alloc_packets(std::max<size_t>(bytes, 64)));
    if (p_ == nullptr) {
      return errorf(Code::kSystemError,
                    "out of memory allocating the two-shot schedule's packets (%zu bytes)", bytes);
    }
    return Status::Ok();
  }
  uint8_t* at(size_t off) { return p_ + off; }

 private:
  SliceOps& ops_;
  uint8_t* p_ = nullptr;
};

// What one two-shot call runs, set by name: the AllReduce's two phases or the ReduceScatter's one.
struct TwoShotCall {
  bool gather = true;  // AllReduce: each owner's sum goes to every rank (phase 2)
  uint8_t scatter_phase = 0, gather_phase = 0;
  SliceOps* ops = nullptr;
  RingStats* stats = nullptr;    // optional
  SampleCarry* carry = nullptr;  // optional: the accuracy sample rides in the messages
  Speculation* spec = nullptr;   // optional: the decision goes ahead of the data
};

// The two-shot shape: its layout, contributions, decisions, sums and decodes over an Exchange.
class TwoShotRun {
 public:
  // Closes the transport (Exchange::fail): after a failure nothing may write into the packets.
  void fail() { ex_.fail(); }
  TwoShotRun(const CommLink& link, RingPlan plan, const TwoShotCall& call)
      : link_(link),
        plan_(std::move(plan)),
        gather_(call.gather),
        scatter_phase_(call.scatter_phase),
        gather_phase_(call.gather_phase),
        ops_(*call.ops),
        stats_(call.stats),
        carry_(call.carry),
        pk_(*call.ops),
        p_(link.nranks),
        s_(plan_.max_slices()),
        ex_(link, "the two-shot schedule") {
    if (call.spec != nullptr) header_.emplace(*call.spec);
  }

  Status run() {
    SCCL_RETURN_IF_ERROR(layout());
    SCCL_RETURN_IF_ERROR(connect_all(link_));
    const int r = link_.rank;
    if (header_) {
      // The decision first; each peer's contributions are received once its decision is known.
      SCCL_RETURN_IF_ERROR(header_->start(ex_, note(Kind::kDecision, -1, 0)));
    } else {
      // Every receive first: the others' contributions to this rank's chunk, then (AllReduce)
      // every other chunk's reduced packet.
      for (int q = 0; q < p_; ++q) {
        if (q != r) SCCL_RETURN_IF_ERROR(post_contributions(q));
      }
      SCCL_RETURN_IF_ERROR(post_reduced());
    }
    missing_.assign(static_cast<size_t>(s_), 0);
    for (int j = 0; j < s_; ++j) {
      size_t off = 0, n = 0;
      plan_.slice(r, j, &off, &n);
      missing_[static_cast<size_t>(j)] = n == 0 ? -1 : p_ - 1;
    }
    // This rank's contributions to every other chunk, each sent as soon as it is encoded, and
    // between slices whatever has arrived is reduced and decoded, so that the reduced packets go
    // out while the contributions still flow (the links carry both phases at once, as the ring's
    // pipeline does). Every encode still reads the input before any decode writes the output
    // (in-place calls): a reduced packet of slice j arrives only after its owner has this rank's
    // contribution to it, and this rank's own slice j is reduced only after its slice j is encoded.
    for (int j = 0; j < s_; ++j) {
      // A ReduceScatter quantizes its own contribution too (d = 0), below.
      for (int d = gather_ ? 1 : 0; d < p_; ++d) {
        const int c = (r + d) % p_;
        size_t off = 0, n = 0;
        plan_.slice(c, j, &off, &n);
        if (n == 0) continue;
        const size_t bytes = ops_.packet_bytes(off, n);
        uint8_t* pkt = own_at(c, j);
        Status st = ops_.encode(off, n, two_shot_contribution_step(r), pkt, bytes);
        if (!st.ok()) return annotate(st, j, "encode of this rank's contribution");
        if (c == r) continue;
        if (carry_ != nullptr) trailer_.put(c, j, carry_->own + trailer_.first(c, j), pkt, bytes);
        SCCL_RETURN_IF_ERROR(post_send(Kind::kContribution, c, j, pkt, bytes, msg_of(c, j)));
        SCCL_RETURN_IF_ERROR(ex_.progress());
      }
      bool moved = false;
      SCCL_RETURN_IF_ERROR(advance(j + 1, &moved));
    }
    SCCL_RETURN_IF_ERROR(drive());
    return ex_.wait_local([this](bool* done) { return ops_.flush(done); }, "its own decodes");
  }

 private:
  // What a transfer is, in its note's cookie with the chunk of its packet.
  enum class Kind { kContribution, kReduced, kDecision, kDrain };
  static constexpr int kKinds = 4;
  TransferNote note(Kind kind, int j, uint8_t phase, int chunk = 0) const {
    TransferNote n;
    n.slice = j;
    n.phase = phase;
    n.cookie = static_cast<int>(kind) + kKinds * chunk;
    return n;
  }
  static Kind kind_of(const TransferNote& n) { return static_cast<Kind>(n.cookie % kKinds); }
  static int chunk_of(const TransferNote& n) { return n.cookie / kKinds; }

  // A message: the packet, then (carried sample) the slice's trailer.
  size_t msg_of(int c, int j) const { return trailer_.message_bytes(bytes_of(c, j), c, j); }
  size_t bytes_of(int c, int j) const {
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    return n == 0 ? 0 : ops_.packet_bytes(off, n);
  }
  size_t idx(int c, int j) const {
    return static_cast<size_t>(c) * static_cast<size_t>(s_) + static_cast<size_t>(j);
  }
  uint8_t* own_at(int c, int j) { return pk_.at(own_off_[idx(c, j)]); }
  uint8_t* contrib_at(int q, int j) { return pk_.at(contrib_off_[idx(q, j)]); }
  uint8_t* final_at(int c, int j) { return pk_.at(final_off_[idx(c, j)]); }

  // One block: this rank's encoded contributions (every chunk), the others' contributions to
  // its chunk, and every chunk's reduced packet (the AllReduce's).
  Status layout() {
    if (s_ > kMaxSlices) {
      return errorf(Code::kInvalidUsage,
                    "two-shot: %d slices per chunk exceed 2^19 - 1; raise SKETCHCCL_SLICE_BYTES",
                    s_);
    }
    if (p_ > 1 && link_.transport->properties().tag_bits < kRingTagBits) {
      return errorf(Code::kInvalidUsage,
                    "two-shot: its tags need %d bits but the %s transport carries only %d",
                    kRingTagBits, link_.transport->name(), link_.transport->properties().tag_bits);
    }
    const size_t cells = static_cast<size_t>(p_) * static_cast<size_t>(s_);
    if (carry_ != nullptr) SCCL_RETURN_IF_ERROR(trailer_.place(*carry_, plan_, p_));
    own_off_.assign(cells, 0);
    contrib_off_.assign(cells, 0);
    final_off_.assign(cells, 0);
    size_t total = 0;
    auto place = [&total](size_t bytes) {
      const size_t at = total;
      total += (bytes + 63) & ~size_t(63);
      return at;
    };
    for (int c = 0; c < p_; ++c) {
      for (int j = 0; j < s_; ++j) {
        if (c != link_.rank || !gather_) own_off_[idx(c, j)] = place(msg_of(c, j));
        if (c != link_.rank) contrib_off_[idx(c, j)] = place(msg_of(link_.rank, j));
        if (gather_ || c == link_.rank) final_off_[idx(c, j)] = place(msg_of(c, j));
      }
    }
    return pk_.alloc(total);
  }

  Status post_contributions(int q) {
    for (int j = 0; j < s_; ++j)
      SCCL_RETURN_IF_ERROR(post_recv(Kind::kContribution, q, j, link_.rank, contrib_at(q, j)));
    return Status::Ok();
  }
  Status post_reduced() {
    if (!gather_) return Status::Ok();
    for (int j = 0; j < s_; ++j) {
      for (int c = 0; c < p_; ++c) {
        if (c != link_.rank) {
          SCCL_RETURN_IF_ERROR(post_recv(Kind::kReduced, c, j, c, final_at(c, j)));
        }
      }
    }
    return Status::Ok();
  }

  // Peer q's decision arrived: the same as this rank's, its contributions are this call's data;
  // another, the ranks disagree, and what q sent speculatively is received and dropped.
  Status take_decision(int q) {
    switch (header_->take(q)) {
      case DecisionHeader::Peer::kTake:
        SCCL_RETURN_IF_ERROR(post_contributions(q));
        break;
      case DecisionHeader::Peer::kDrop:
        SCCL_RETURN_IF_ERROR(
            post_drops(drops_, ex_, plan_, scatter_phase_, q, note(Kind::kDrain, -1, 0)));
        break;
      case DecisionHeader::Peer::kNone:
        break;
    }
    // Every rank's decision is this rank's: the owners will send their reduced packets.
    if (header_->all_equal()) SCCL_RETURN_IF_ERROR(post_reduced());
    return Status::Ok();
  }

  Status post_recv(Kind kind, int peer, int j, int chunk, uint8_t* pkt) {
    const size_t bytes = msg_of(chunk, j);
    if (bytes == 0) return Status::Ok();
    const uint8_t phase = kind == Kind::kContribution ? scatter_phase_ : gather_phase_;
    return ex_.recv(peer, ring_tag(link_.op_seq, phase, 0, j), pkt, bytes,
                    note(kind, j, phase, chunk));
  }

  // `bytes` of the packet, `msg` with the carried sample.
  Status post_send(Kind kind, int peer, int j, const uint8_t* pkt, size_t bytes, size_t msg) {
    const uint8_t phase = kind == Kind::kContribution ? scatter_phase_ : gather_phase_;
    SCCL_RETURN_IF_ERROR(
        ex_.send(peer, ring_tag(link_.op_seq, phase, 0, j), pkt, msg, note(kind, j, phase)));
    if (stats_ != nullptr) {
      stats_->bytes_sent += bytes;
      stats_->sample_bytes_sent += msg - bytes;
    }
    return Status::Ok();
  }

  // Slice j of this rank's chunk has every contribution: their fp32 sum in rank order, then its
  // packet to every rank (AllReduce) or the output (ReduceScatter). An AllReduce takes the
  // owner's own contribution exact (the sum is quantized once more anyway); a ReduceScatter's
  // output is the sum itself, so it quantizes the owner's too: P contributions each quantized
  // once, the same error per element at every P.
  Status reduce(int j) {
    const int r = link_.rank;
    size_t off = 0, n = 0;
    plan_.slice(r, j, &off, &n);
    float* sum = nullptr;
    Status st = ops_.sum_scratch(n, &sum);
    if (st.ok()) st = gather_ ? ops_.load_own(off, n, sum) : ops_.zero_sum(sum, n);
    for (int q = 0; q < p_ && st.ok(); ++q) {
      if (q == r && gather_) continue;
      st = ops_.decode_add(off, n, two_shot_contribution_step(q),
                           q == r ? own_at(r, j) : contrib_at(q, j), bytes_of(r, j), sum);
    }
    if (!st.ok()) return annotate(st, j, "sum of the contributions to this rank's chunk");
    if (!gather_) {
      st = ops_.store_sum(off, n, sum);
      if (!st.ok()) return annotate(st, j, "store of this rank's reduced chunk");
      // The exact sums stay with the owner: its tally of them goes out after the call.
      if (carry_ != nullptr) sum_sample(j, nullptr);
      return st;
    }
    const size_t bytes = bytes_of(r, j);
    uint8_t* pkt = final_at(r, j);
    st = ops_.encode_sum(off, n, kTwoShotSumStep, sum, pkt, bytes);
    if (!st.ok()) return annotate(st, j, "encode of this rank's reduced chunk");
    if (carry_ != nullptr) sum_sample(j, pkt + bytes);
    for (int d = 1; d < p_; ++d)
      SCCL_RETURN_IF_ERROR(post_send(Kind::kReduced, (r + d) % p_, j, pkt, bytes, msg_of(r, j)));
    return decode(r, j);
  }

  // The exact sums at the sampled positions of slice j of this rank's chunk: every rank's values
  // (its own from the carry, the others' after their packets), added in rank order in fp32, into
  // the carry and (an AllReduce's) after the reduced packet at `out`.
  void sum_sample(int j, uint8_t* out) {
    const int r = link_.rank;
    const size_t k = trailer_.count(r, j), first = trailer_.first(r, j);
    if (k == 0) return;
    float* exact = carry_->exact + first;
    std::fill(exact, exact + k, 0.0f);
    std::vector<float> v(k);
    for (int q = 0; q < p_; ++q) {
      const float* in = carry_->own + first;
      if (q != r) {
        trailer_.get(r, j, contrib_at(q, j), bytes_of(r, j), v.data());
        in = v.data();
      }
      for (size_t i = 0; i < k; ++i)
        exact[i] += in[i];
    }
    if (out != nullptr) trailer_.put(r, j, exact, out, 0);
  }

  Status decode(int c, int j) {
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    Status st = ops_.decode_start(off, n, final_at(c, j), bytes_of(c, j));
    return st.ok() ? st : annotate(st, j, "decode of a reduced packet");
  }

  // One pass without waiting: reduces the slices of this rank's chunk below `limit` whose
  // contributions are all in, and takes what the Exchange completed (a decision, a contribution;
  // a reduced packet is decoded as it arrives). `moved`: anything happened.
  Status advance(int limit, bool* moved) {
    for (int j = 0; j < limit; ++j) {
      if (missing_[static_cast<size_t>(j)] == 0) {
        missing_[static_cast<size_t>(j)] = -1;
        SCCL_RETURN_IF_ERROR(reduce(j));
        *moved = true;
      }
    }
    done_.clear();
    SCCL_RETURN_IF_ERROR(ex_.poll(&done_));
    for (const Completion& d : done_) {
      *moved = true;
      if (!d.recv) continue;
      const Kind kind = kind_of(d.note);
      if (kind == Kind::kDecision) {
        SCCL_RETURN_IF_ERROR(take_decision(d.peer));
        continue;
      }
      if (stats_ != nullptr) stats_->bytes_received += d.bytes;
      const int j = d.note.slice, c = chunk_of(d.note);
      if (kind == Kind::kContribution) {
        missing_[static_cast<size_t>(j)]--;
      } else if (kind == Kind::kReduced) {
        if (carry_ != nullptr) {
          trailer_.get(c, j, final_at(c, j), bytes_of(c, j), carry_->exact + trailer_.first(c, j));
        }
        SCCL_RETURN_IF_ERROR(decode(c, j));
      }
    }
    return Status::Ok();
  }

  // Completes every transfer, reducing each slice of this rank's chunk once its contributions are
  // in and decoding each reduced packet as it arrives; waits by the Exchange's rule.
  Status drive() {
    for (;;) {
      bool moved = false;
      SCCL_RETURN_IF_ERROR(advance(s_, &moved));
      if (ex_.pending() == 0 && header_ && header_->disagreed()) {
        // Every decision is in and every speculative message received: nothing was reduced (a
        // slice needs every rank's contribution, each received only under an equal decision).
        header_->settle();
        return Status::Ok();
      }
      if (ex_.pending() == 0) {
        // The last reduces may have been done in this pass, their sends then still pending.
        bool left = false;
        for (int m : missing_)
          left = left || m >= 0;
        if (!left) return Status::Ok();
      }
      if (moved) {
        ex_.progressed();
      } else {
        SCCL_RETURN_IF_ERROR(ex_.idle());
      }
    }
  }

  Status annotate(const Status& st, int j, const char* what) const {
    TransferNote n;
    n.slice = j;
    return ex_.annotate(st, what, n);
  }

  const CommLink& link_;
  RingPlan plan_;
  bool gather_;
  uint8_t scatter_phase_, gather_phase_;
  SliceOps& ops_;
  RingStats* stats_;
  SampleCarry* carry_;
  std::optional<DecisionHeader> header_;  // the decision ahead of the data (speculative calls)
  Drops drops_;            // receives of another decision's speculative contributions
  SampleTrailer trailer_;  // the carried sample's place in the messages
  Packets pk_;
  int p_, s_;
  std::vector<size_t> own_off_, contrib_off_, final_off_;
  std::vector<int> missing_;  // per slice of this rank's chunk: contributions still due; -1 done
  std::vector<Completion> done_;  // one pass's completions
  // Last, so first to go: a failed call's pending receives are closed before their memory.
  Exchange ex_;
};

Status run_two_shot(const CommLink& link, RingPlan plan, const TwoShotCall& call) {
  SCCL_RETURN_IF_ERROR(check_link(link, "two-shot"));
  if (!call.ops->sums()) {
    return Status(Code::kInternalError, "two-shot: the slice operations keep no sums");
  }
  TwoShotRun run(link, std::move(plan), call);
  Status st = run.run();
  // The ranks are out of step after a failure, pending transfers or not: the communicator is
  // finished, as after a failed ring.
  if (!st.ok()) run.fail();
  return st;
}

// The call each entry point describes (`gather`: an AllReduce, else a ReduceScatter).
TwoShotCall two_shot_call(bool gather, uint8_t scatter_phase, uint8_t gather_phase, SliceOps& ops,
                          RingStats* stats, SampleCarry* sample, Speculation* spec) {
  TwoShotCall call;
  call.gather = gather;
  call.scatter_phase = scatter_phase;
  call.gather_phase = gather_phase;
  call.ops = &ops;
  call.stats = stats;
  call.carry = sample;
  call.spec = spec;
  return call;
}

}  // namespace

RingPlan two_shot_plan(bool all_reduce, size_t count, int nranks, size_t slice_elems) {
  return all_reduce ? RingPlan(count, nranks, slice_elems, kRingChunkAlign)
                    : RingPlan(count, nranks, slice_elems);
}

Status two_shot_drain(const CommLink& link, uint8_t scatter_phase, const RingPlan& plan,
                      const std::vector<int>& peers) {
  SCCL_RETURN_IF_ERROR(check_link(link, "two-shot"));
  if (peers.empty()) return Status::Ok();
  Drops drops;
  // After `drops`, so first to go: a failure closes the pending receives before their memory.
  Exchange ex(link, "the drop of speculative contributions");
  for (int q : peers)
    SCCL_RETURN_IF_ERROR(post_drops(drops, ex, plan, scatter_phase, q, {}));
  return ex.wait_all();
}

Status two_shot_allreduce(const CommLink& link, uint8_t scatter_phase, uint8_t gather_phase,
                          size_t count, size_t slice_elems, SliceOps& ops, RingStats* stats,
                          SampleCarry* sample, Speculation* spec) {
  if (count == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(check_link(link, "two-shot"));
  return run_two_shot(link, two_shot_plan(true, count, link.nranks, slice_elems),
                      two_shot_call(true, scatter_phase, gather_phase, ops, stats, sample, spec));
}

Status two_shot_reduce_scatter(const CommLink& link, uint8_t scatter_phase, size_t count,
                               size_t slice_elems, SliceOps& ops, RingStats* stats,
                               const std::vector<size_t>* bounds, Speculation* spec,
                               SampleCarry* sample) {
  if (count == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(check_link(link, "two-shot"));
  // One phase: the reduced chunk stays with its owner.
  const TwoShotCall call =
      two_shot_call(false, scatter_phase, scatter_phase, ops, stats, sample, spec);
  if (bounds == nullptr || bounds->empty()) {
    return run_two_shot(link, two_shot_plan(false, count, link.nranks, slice_elems), call);
  }
  // A rank that did not speculate drains the even cut (two_shot_plan); the sample is the input's.
  if (spec != nullptr || sample != nullptr) {
    return Status(Code::kInternalError,
                  "two-shot: a speculative or sampled ReduceScatter over a subset");
  }
  if (bounds->size() != static_cast<size_t>(link.nranks) + 1 || bounds->front() != 0 ||
      bounds->back() != count || !std::is_sorted(bounds->begin(), bounds->end())) {
    return Status(Code::kInternalError, "two-shot: chunk bounds do not cut the count");
  }
  return run_two_shot(link, RingPlan(*bounds, slice_elems), call);
}

}  // namespace sketchccl::coll
