#include "src/coll/two_shot.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "kernels/sparse.h"

namespace sketchccl::coll {
namespace {

using Clock = std::chrono::steady_clock;
using transport::RequestId;
// Longest single sleep in the transport while waiting (as the ring's).
constexpr double kBlockingWaitS = 0.002;
constexpr int kMaxSlices = (1 << 19) - 1;  // the tag's slice field

// A receive for a speculative contribution of another codec than this rank's: any quantizing
// codec's packet of n elements (at most its fp32 bytes plus headers) and the carried sample.
size_t drain_bytes(size_t n) {
  return 8 * n + 4096;
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

class TwoShotRun {
 public:
  TwoShotRun(const CommLink& link, RingPlan plan, bool gather, uint8_t scatter_phase,
             uint8_t gather_phase, SliceOps& ops, RingStats* stats, SampleCarry* carry,
             Speculation* spec)
      : link_(link),
        plan_(std::move(plan)),
        gather_(gather),
        scatter_phase_(scatter_phase),
        gather_phase_(gather_phase),
        ops_(ops),
        stats_(stats),
        carry_(carry),
        spec_(spec),
        pk_(ops),
        p_(link.nranks),
        s_(plan_.max_slices()) {}

  Status run() {
    SCCL_RETURN_IF_ERROR(layout());
    SCCL_RETURN_IF_ERROR(connect());
    const int r = link_.rank;
    if (spec_ != nullptr) {
      // The decision first; each peer's contributions are received once its decision is known.
      SCCL_RETURN_IF_ERROR(start_decision());
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
        if (carry_ != nullptr && samples(c, j) > 0) {
          std::memcpy(pkt + bytes, carry_->own + sample_first(c, j), 4 * samples(c, j));
        }
        SCCL_RETURN_IF_ERROR(post_send(c, scatter_phase_, j, pkt, bytes, msg_of(c, j)));
        SCCL_RETURN_IF_ERROR(link_.transport->progress());
      }
      bool moved = false;
      SCCL_RETURN_IF_ERROR(advance(j + 1, &moved));
    }
    SCCL_RETURN_IF_ERROR(drive());
    return flush();
  }

 private:
  enum class Kind { kContribution, kReduced, kDecision, kDrain };
  struct Pending {
    RequestId id = 0;
    int peer = 0;
    int slice = 0;
    bool recv = false;
    Kind kind = Kind::kContribution;
    int chunk = 0;
    size_t expect = 0;
    uint8_t* pkt = nullptr;
  };

  // The sampled positions in slice j of chunk c: how many, and the first's index in the sample.
  size_t samples(int c, int j) const { return carry_ == nullptr ? 0 : scount_[idx(c, j)]; }
  size_t sample_first(int c, int j) const { return carry_ == nullptr ? 0 : sfirst_[idx(c, j)]; }
  // A message: the packet, then (carried sample) the slice's sampled values.
  size_t msg_of(int c, int j) const {
    const size_t b = bytes_of(c, j);
    return b == 0 ? 0 : b + 4 * samples(c, j);
  }
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
    if (carry_ != nullptr) {
      sfirst_.assign(cells, 0);
      scount_.assign(cells, 0);
      // Chunks and their slices follow each other in element order: one pass over the bitmap.
      size_t seen = 0, next = 0;
      for (int c = 0; c < p_; ++c) {
        for (int j = 0; j < s_; ++j) {
          size_t off = 0, n = 0;
          plan_.slice(c, j, &off, &n);
          if (n != 0 && off != next) {
            return Status(Code::kInternalError, "two-shot: slices out of element order");
          }
          next = n == 0 ? next : off + n;
          sfirst_[idx(c, j)] = seen;
          scount_[idx(c, j)] = n == 0 ? 0 : bits_in(off, off + n);
          seen += scount_[idx(c, j)];
        }
      }
      if (seen != carry_->m) {
        return Status(Code::kInternalError, "two-shot: the carried sample's size does not match");
      }
    }
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

  // Every peer's decision is received and this rank's sent, ahead of its contributions.
  Status start_decision() {
    theirs_.assign(static_cast<size_t>(p_), DecisionMessage{});
    const uint64_t tag = ring_tag(link_.op_seq, spec_->phase, 0, 0);
    for (int q = 0; q < p_; ++q) {
      if (q == link_.rank) continue;
      Pending pd;
      pd.peer = q;
      pd.recv = true;
      pd.kind = Kind::kDecision;
      pd.expect = sizeof(DecisionMessage);
      SCCL_RETURN_IF_ERROR(link_.transport->irecv(q, tag, &theirs_[static_cast<size_t>(q)],
                                                  sizeof(DecisionMessage), &pd.id));
      pending_.push_back(pd);
    }
    for (int q = 0; q < p_; ++q) {
      if (q == link_.rank) continue;
      Pending pd;
      pd.peer = q;
      SCCL_RETURN_IF_ERROR(
          link_.transport->isend(q, tag, &spec_->mine, sizeof(DecisionMessage), &pd.id));
      pending_.push_back(pd);
    }
    decisions_left_ = p_ - 1;
    return Status::Ok();
  }

  // Peer q's decision arrived: the same as this rank's, its contributions are this call's data;
  // another, the ranks disagree, and what q sent speculatively is received and dropped.
  Status take_decision(int q) {
    const DecisionMessage& d = theirs_[static_cast<size_t>(q)];
    if (same_decision(d, spec_->mine)) {
      SCCL_RETURN_IF_ERROR(post_contributions(q));
    } else {
      disagreed_ = true;
      if (d.speculative != 0) SCCL_RETURN_IF_ERROR(post_drains(q));
    }
    // Every rank's decision is this rank's: the owners will send their reduced packets.
    if (--decisions_left_ == 0 && !disagreed_) SCCL_RETURN_IF_ERROR(post_reduced());
    return Status::Ok();
  }

  Status post_drains(int q) {
    for (int j = 0; j < s_; ++j) {
      size_t off = 0, n = 0;
      plan_.slice(link_.rank, j, &off, &n);
      if (n == 0) continue;
      drains_.emplace_back(new uint8_t[drain_bytes(n)]);
      Pending pd;
      pd.peer = q;
      pd.slice = j;
      pd.recv = true;
      pd.kind = Kind::kDrain;
      pd.expect = drain_bytes(n);
      SCCL_RETURN_IF_ERROR(link_.transport->irecv(q, ring_tag(link_.op_seq, scatter_phase_, 0, j),
                                                  drains_.back().get(), pd.expect, &pd.id));
      pending_.push_back(pd);
    }
    return Status::Ok();
  }

  // Every peer once; the ring connected only the neighbours.
  Status connect() {
    if (link_.addresses == nullptr) return Status::Ok();
    for (int q = 0; q < p_; ++q) {
      if (q == link_.rank) continue;
      if (static_cast<size_t>(q) >= link_.addresses->size()) {
        return errorf(Code::kInternalError, "two-shot: rank %d has no address for rank %d",
                      link_.rank, q);
      }
      SCCL_RETURN_IF_ERROR(link_.transport->connect(q, (*link_.addresses)[static_cast<size_t>(q)]));
    }
    return Status::Ok();
  }

  // Set bits of the sample's bitmap among elements [begin, end).
  size_t bits_in(size_t begin, size_t end) const {
    return kernels::bitmap_count_range(carry_->bits, begin, end);
  }

  Status post_recv(Kind kind, int peer, int j, int chunk, uint8_t* pkt) {
    const size_t bytes = msg_of(chunk, j);
    if (bytes == 0) return Status::Ok();
    const uint8_t phase = kind == Kind::kContribution ? scatter_phase_ : gather_phase_;
    Pending pd;
    pd.peer = peer;
    pd.slice = j;
    pd.recv = true;
    pd.kind = kind;
    pd.chunk = chunk;
    pd.expect = bytes;
    pd.pkt = pkt;
    SCCL_RETURN_IF_ERROR(
        link_.transport->irecv(peer, ring_tag(link_.op_seq, phase, 0, j), pkt, bytes, &pd.id));
    pending_.push_back(pd);
    return Status::Ok();
  }

  // `bytes` of the packet, `msg` with the carried sample.
  Status post_send(int peer, uint8_t phase, int j, const uint8_t* pkt, size_t bytes, size_t msg) {
    Pending pd;
    pd.peer = peer;
    pd.slice = j;
    SCCL_RETURN_IF_ERROR(
        link_.transport->isend(peer, ring_tag(link_.op_seq, phase, 0, j), pkt, msg, &pd.id));
    pending_.push_back(pd);
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
      SCCL_RETURN_IF_ERROR(post_send((r + d) % p_, gather_phase_, j, pkt, bytes, msg_of(r, j)));
    return decode(r, j);
  }

  // The exact sums at the sampled positions of slice j of this rank's chunk: every rank's values
  // (its own from the carry, the others' after their packets), added in rank order in fp32, into
  // the carry and (an AllReduce's) after the reduced packet at `out`.
  void sum_sample(int j, uint8_t* out) {
    const int r = link_.rank;
    const size_t k = samples(r, j), first = sample_first(r, j);
    if (k == 0) return;
    float* exact = carry_->exact + first;
    std::fill(exact, exact + k, 0.0f);
    std::vector<float> v(k);
    for (int q = 0; q < p_; ++q) {
      const float* in = carry_->own + first;
      if (q != r) {
        std::memcpy(v.data(), contrib_at(q, j) + bytes_of(r, j), 4 * k);
        in = v.data();
      }
      for (size_t i = 0; i < k; ++i)
        exact[i] += in[i];
    }
    if (out != nullptr) std::memcpy(out, exact, 4 * k);
  }

  Status decode(int c, int j) {
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    Status st = ops_.decode_start(off, n, final_at(c, j), bytes_of(c, j));
    return st.ok() ? st : annotate(st, j, "decode of a reduced packet");
  }

  // One pass without waiting: reduces the slices of this rank's chunk below `limit` whose
  // contributions are all in, moves the transport, and takes what completed (a reduced packet is
  // decoded as it arrives). `moved`: anything happened.
  Status advance(int limit, bool* moved) {
    for (int j = 0; j < limit; ++j) {
      if (missing_[static_cast<size_t>(j)] == 0) {
        missing_[static_cast<size_t>(j)] = -1;
        SCCL_RETURN_IF_ERROR(reduce(j));
        *moved = true;
      }
    }
    if (pending_.empty()) return Status::Ok();
    if (link_.abort != nullptr && link_.abort->load()) {
      return Status(Code::kRemoteError, "operation aborted (ncclCommAbort)");
    }
    SCCL_RETURN_IF_ERROR(link_.transport->progress());
    for (size_t i = 0; i < pending_.size();) {
      Pending& pd = pending_[i];
      bool done = false;
      size_t got = 0;
      Status st = link_.transport->test(pd.id, &done, &got);
      if (!st.ok()) {
        // A receive the transport truncated: the peer sent more than this call's packet.
        if (pd.recv && st.code() == Code::kInvalidArgument) {
          return errorf(Code::kInvalidUsage,
                        "rank %d received more than %zu bytes from rank %d for slice %d of the "
                        "two-shot schedule: the ranks disagree on the count, type or codec of "
                        "this call (%s)",
                        link_.rank, pd.expect, pd.peer, pd.slice, st.message().c_str());
        }
        return annotate(
            st, pd.slice,
            pd.recv ? "receive in the two-shot schedule" : "send in the two-shot schedule");
      }
      if (!done) {
        ++i;
        continue;
      }
      *moved = true;
      const Pending d = pd;
      pending_[i] = pending_.back();
      pending_.pop_back();
      if (!d.recv) continue;
      if (d.kind == Kind::kDecision) {
        if (got != d.expect) {
          return errorf(Code::kInvalidUsage,
                        "rank %d received a decision of %zu bytes from rank %d, expected %zu: "
                        "the ranks run different versions or calls",
                        link_.rank, got, d.peer, d.expect);
        }
        SCCL_RETURN_IF_ERROR(take_decision(d.peer));
        continue;
      }
      if (stats_ != nullptr) stats_->bytes_received += got;
      if (d.kind == Kind::kDrain) continue;
      if (got != d.expect) {
        return errorf(Code::kInvalidUsage,
                      "rank %d received %zu bytes from rank %d for slice %d of the two-shot "
                      "schedule, expected %zu: the ranks disagree on the count, type or codec "
                      "of this call",
                      link_.rank, got, d.peer, d.slice, d.expect);
      }
      if (d.kind == Kind::kContribution) {
        missing_[static_cast<size_t>(d.slice)]--;
      } else {
        if (samples(d.chunk, d.slice) > 0) {
          std::memcpy(carry_->exact + sample_first(d.chunk, d.slice),
                      final_at(d.chunk, d.slice) + bytes_of(d.chunk, d.slice),
                      4 * samples(d.chunk, d.slice));
        }
        SCCL_RETURN_IF_ERROR(decode(d.chunk, d.slice));
      }
    }
    return Status::Ok();
  }

  // Completes every transfer, reducing each slice of this rank's chunk once its contributions are
  // in and decoding each reduced packet as it arrives.
  Status drive() {
    auto last = Clock::now();
    int idle = 0;
    for (;;) {
      bool moved = false;
      SCCL_RETURN_IF_ERROR(advance(s_, &moved));
      if (pending_.empty() && disagreed_) {
        // Every decision is in and every speculative message received: nothing was reduced (a
        // slice needs every rank's contribution, each received only under an equal decision).
        spec_->disagreed = true;
        return Status::Ok();
      }
      if (pending_.empty()) {
        // The last reduces may have been done in this pass, their sends then still pending.
        bool left = false;
        for (int m : missing_)
          left = left || m >= 0;
        if (!left) return Status::Ok();
      }
      if (moved) {
        last = Clock::now();
        idle = 0;
        continue;
      }
      if (std::chrono::duration<double>(Clock::now() - last).count() > link_.timeout_s) {
        return timeout_error();
      }
      if (link_.transport->can_block()) {
        SCCL_RETURN_IF_ERROR(link_.transport->wait_for_events(kBlockingWaitS));
      } else if (++idle > 4096) {
        usleep(50);
      } else if (idle > 256) {
        sched_yield();
      }
    }
  }

  Status flush() {
    const auto t0 = Clock::now();
    for (;;) {
      bool done = false;
      SCCL_RETURN_IF_ERROR(ops_.flush(&done));
      if (done) return Status::Ok();
      if (link_.abort != nullptr && link_.abort->load()) {
        return Status(Code::kRemoteError, "operation aborted (ncclCommAbort)");
      }
      if (std::chrono::duration<double>(Clock::now() - t0).count() > link_.timeout_s) {
        return errorf(Code::kRemoteError,
                      "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) waiting for its own "
                      "decodes",
                      link_.rank, link_.timeout_s);
      }
      usleep(20);
    }
  }

  Status timeout_error() const {
    for (const Pending& pd : pending_) {
      return errorf(Code::kRemoteError,
                    "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) waiting for %s rank %d "
                    "(slice %d of the two-shot schedule)",
                    link_.rank, link_.timeout_s, pd.recv ? "a packet from" : "the send to", pd.peer,
                    pd.slice);
    }
    return errorf(Code::kRemoteError, "rank %d timed out", link_.rank);
  }

  Status annotate(const Status& st, int j, const char* what) const {
    return Status(st.code(), st.message() + " (rank " + std::to_string(link_.rank) + " of " +
                                 std::to_string(link_.nranks) + ", " + what + ", slice " +
                                 std::to_string(j) + ")");
  }

  const CommLink& link_;
  RingPlan plan_;
  bool gather_;
  uint8_t scatter_phase_, gather_phase_;
  SliceOps& ops_;
  RingStats* stats_;
  SampleCarry* carry_;
  Speculation* spec_;
  std::vector<DecisionMessage> theirs_;  // every rank's decision (speculation)
  int decisions_left_ = 0;
  bool disagreed_ = false;
  std::vector<std::unique_ptr<uint8_t[]>> drains_;  // receives of messages to drop
  std::vector<size_t> sfirst_, scount_;  // per (chunk, slice): the carried sample's range
  Packets pk_;
  int p_, s_;
  std::vector<size_t> own_off_, contrib_off_, final_off_;
  std::vector<Pending> pending_;
  std::vector<int> missing_;  // per slice of this rank's chunk: contributions still due; -1 done
};

Status check_link(const CommLink& link) {
  if (link.nranks < 1 || link.rank < 0 || link.rank >= link.nranks) {
    return errorf(Code::kInternalError, "two-shot: rank %d of %d", link.rank, link.nranks);
  }
  if (link.nranks > 1 && link.transport == nullptr) {
    return Status(Code::kInternalError, "two-shot: no transport");
  }
  return Status::Ok();
}

Status run_two_shot(const CommLink& link, RingPlan plan, bool gather, uint8_t scatter_phase,
                    uint8_t gather_phase, SliceOps& ops, RingStats* stats,
                    SampleCarry* carry = nullptr, Speculation* spec = nullptr) {
  SCCL_RETURN_IF_ERROR(check_link(link));
  if (!ops.sums()) {
    return Status(Code::kInternalError, "two-shot: the slice operations keep no sums");
  }
  Status st;
  {
    TwoShotRun run(link, std::move(plan), gather, scatter_phase, gather_phase, ops, stats, carry,
                   spec);
    st = run.run();
    // A failure leaves receives posted into the packets about to go, and the ranks out of step:
    // close the transport first (it cancels them), as the ring does.
    if (!st.ok() && link.transport != nullptr) link.transport->close();
  }
  return st;
}

}  // namespace

bool same_decision(const DecisionMessage& a, const DecisionMessage& b) {
  return a.speculative == b.speculative && a.reserved == b.reserved &&
         std::memcmp(a.inputs, b.inputs, sizeof a.inputs) == 0;
}

namespace {

struct Req {
  RequestId id;
  int peer;
  bool recv;
  size_t expect;  // a receive's size; 0: any size up to its buffer
};

// Completes `reqs` within the link's timeout and abort flag; `what` names the exchange in errors.
Status complete_all(const CommLink& link, std::vector<Req>* reqs, const char* what) {
  const int r = link.rank;
  Status st;
  auto last = Clock::now();
  while (st.ok() && !reqs->empty()) {
    if (link.abort != nullptr && link.abort->load()) {
      st = Status(Code::kRemoteError, "communicator aborted");
      break;
    }
    st = link.transport->progress();
    bool moved = false;
    for (size_t i = 0; st.ok() && i < reqs->size();) {
      Req& rq = (*reqs)[i];
      bool done = false;
      size_t got = 0;
      st = link.transport->test(rq.id, &done, &got);
      if (!st.ok() && rq.recv && rq.expect != 0 && st.code() == Code::kInvalidArgument) {
        // A receive the transport truncated: the peer sent more than this exchange's block.
        st =
            errorf(Code::kInvalidUsage,
                   "rank %d received more than %zu bytes from rank %d in %s (phase %d): the "
                   "ranks run different versions or calls (%s)",
                   r, rq.expect, rq.peer, what, static_cast<int>(link.phase), st.message().c_str());
        break;
      }
      if (!st.ok() || !done) {
        ++i;
        continue;
      }
      if (rq.recv && rq.expect != 0 && got != rq.expect) {
        st = errorf(Code::kInvalidUsage,
                    "rank %d received %zu bytes from rank %d in %s (phase %d), expected %zu", r,
                    got, rq.peer, what, static_cast<int>(link.phase), rq.expect);
        break;
      }
      rq = reqs->back();
      reqs->pop_back();
      moved = true;
    }
    if (!st.ok() || reqs->empty()) break;
    if (moved) {
      last = Clock::now();
      continue;
    }
    if (std::chrono::duration<double>(Clock::now() - last).count() > link.timeout_s) {
      st = errorf(Code::kRemoteError,
                  "rank %d timed out after %.1f s (SKETCHCCL_TIMEOUT) in %s (phase %d) waiting "
                  "for rank %d",
                  r, link.timeout_s, what, static_cast<int>(link.phase), reqs->front().peer);
      break;
    }
    if (link.transport->can_block()) {
      st = link.transport->wait_for_events(kBlockingWaitS);
    } else {
      sched_yield();
    }
  }
  // Receives still posted into the caller's memory: the transport must not write there later.
  if (!st.ok()) link.transport->close();
  return st;
}

}  // namespace

Status allgather_direct(const CommLink& link, const void* mine, size_t bytes, void* all,
                        const char* what) {
  SCCL_RETURN_IF_ERROR(check_link(link));
  auto* out = static_cast<uint8_t*>(all);
  const int p = link.nranks, r = link.rank;
  std::memcpy(out + static_cast<size_t>(r) * bytes, mine, bytes);
  if (p == 1 || bytes == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(connect_all(link));
  const uint64_t tag = ring_tag(link.op_seq, link.phase, 0, 0);
  std::vector<Req> reqs;
  Status st;
  for (int d = 1; d < p && st.ok(); ++d) {
    const int q = (r + p - d) % p;
    Req rq{0, q, true, bytes};
    st = link.transport->irecv(q, tag, out + static_cast<size_t>(q) * bytes, bytes, &rq.id);
    if (st.ok()) reqs.push_back(rq);
  }
  for (int d = 1; d < p && st.ok(); ++d) {
    const int q = (r + d) % p;
    Req rq{0, q, false, 0};
    st = link.transport->isend(q, tag, mine, bytes, &rq.id);
    if (st.ok()) reqs.push_back(rq);
  }
  if (!st.ok()) {
    link.transport->close();
    return st;
  }
  return complete_all(link, &reqs, what);
}

RingPlan two_shot_plan(bool all_reduce, size_t count, int nranks, size_t slice_elems) {
  return all_reduce ? RingPlan(count, nranks, slice_elems, kRingChunkAlign)
                    : RingPlan(count, nranks, slice_elems);
}

Status two_shot_drain(const CommLink& link, uint8_t scatter_phase, const RingPlan& plan,
                      const std::vector<int>& peers) {
  SCCL_RETURN_IF_ERROR(check_link(link));
  if (peers.empty()) return Status::Ok();
  std::vector<std::unique_ptr<uint8_t[]>> bufs;
  std::vector<Req> reqs;
  Status st;
  for (int q : peers) {
    for (int j = 0; j < plan.slices(link.rank) && st.ok(); ++j) {
      size_t off = 0, n = 0;
      plan.slice(link.rank, j, &off, &n);
      if (n == 0) continue;
      bufs.emplace_back(new uint8_t[drain_bytes(n)]);
      Req rq{0, q, true, 0};
      st = link.transport->irecv(q, ring_tag(link.op_seq, scatter_phase, 0, j), bufs.back().get(),
                                 drain_bytes(n), &rq.id);
      if (st.ok()) reqs.push_back(rq);
    }
  }
  if (!st.ok()) {
    link.transport->close();
    return st;
  }
  CommLink l = link;
  l.phase = scatter_phase;
  return complete_all(l, &reqs, "the drop of speculative contributions");
}

Status two_shot_allreduce(const CommLink& link, uint8_t scatter_phase, uint8_t gather_phase,
                          size_t count, size_t slice_elems, SliceOps& ops, RingStats* stats,
                          SampleCarry* sample, Speculation* spec) {
  if (count == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(check_link(link));
  return run_two_shot(link, two_shot_plan(true, count, link.nranks, slice_elems), true,
                      scatter_phase, gather_phase, ops, stats, sample, spec);
}

Status two_shot_reduce_scatter(const CommLink& link, uint8_t scatter_phase, size_t count,
                               size_t slice_elems, SliceOps& ops, RingStats* stats,
                               const std::vector<size_t>* bounds, Speculation* spec,
                               SampleCarry* sample) {
  if (count == 0) return Status::Ok();
  SCCL_RETURN_IF_ERROR(check_link(link));
  if (bounds == nullptr || bounds->empty()) {
    return run_two_shot(link, two_shot_plan(false, count, link.nranks, slice_elems), false,
                        scatter_phase, scatter_phase, ops, stats, sample, spec);
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
  return run_two_shot(link, RingPlan(*bounds, slice_elems), false, scatter_phase, scatter_phase,
                      ops, stats);
}

}  // namespace sketchccl::coll
