#include "src/coll/ring.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "src/core/log.h"

namespace sketchccl::coll {
namespace {

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

// Packet memory from the SliceOps (a GPU backend gives pinned host memory, so its copies run
// without the host waiting). Grows, never shrinks; contents are not kept across a growth.
class PacketBuf {
 public:
  static constexpr size_t kGranule = size_t(64) << 10;
  PacketBuf() = default;
  PacketBuf(const PacketBuf&) = delete;
  PacketBuf& operator=(const PacketBuf&) = delete;
  PacketBuf(PacketBuf&& o) noexcept
      : ops_(o.ops_), p_(std::exchange(o.p_, nullptr)), cap_(o.cap_), size_(o.size_) {}
  PacketBuf& operator=(PacketBuf&&) = delete;
  ~PacketBuf() {
    if (p_ != nullptr) ops_->free_packets(p_);
  }
  Status resize(SliceOps& ops, size_t n) {
    if (n > cap_ || p_ == nullptr) {
      if (p_ != nullptr) ops_->free_packets(p_);
      p_ = nullptr;
      cap_ = size_ = 0;
      // In 64 KiB steps: chunks differ by an element, and a lane's packets by a few bytes, so
      // a lane allocates once (a GPU backend's arena does not reuse memory within an operation).
      const size_t cap = (std::max<size_t>(n, 1) + kGranule - 1) / kGranule * kGranule;
      void* p = ops.alloc_packets(cap);
      if (p == nullptr) {
        return errorf(Code::kSystemError, "out of memory allocating the ring's packets (%zu bytes)",
                      cap);
      }
      ops_ = &ops;
      p_ = static_cast<uint8_t*>(p);
      cap_ = cap;
    }
    size_ = n;
    return Status::Ok();
  }
  uint8_t* data() { return p_; }
  size_t size() const { return size_; }
  // Gives the memory up without freeing it: the device may still write into it.
  void park() {
    p_ = nullptr;
    cap_ = size_ = 0;
  }

 private:
  SliceOps* ops_ = nullptr;
  uint8_t* p_ = nullptr;
  size_t cap_ = 0;
  size_t size_ = 0;
};

// Every chunk's reduced packets, slice by slice, in one block: the all-gather receives into
// them and forwards them, and the lanes decode them at the end.
class FinalPackets {
 public:
  FinalPackets(const RingPlan& plan, int nranks, const SliceOps& ops)
      : plan_(plan), ops_(ops), slices_(plan.max_slices()) {
    offset_.assign(static_cast<size_t>(nranks) * static_cast<size_t>(slices_) + 1, 0);
    for (int c = 0; c < nranks; ++c) {
      for (int j = 0; j < slices_; ++j) {
        offset_[idx(c, j)] = total_;
        total_ += bytes(c, j);
      }
    }
  }
  Status allocate(SliceOps& ops) { return mem_.resize(ops, total_); }
  // The packet of slice j of chunk c, and its size (0: the slice is empty).
  uint8_t* at(int c, int j) { return mem_.data() + offset_[idx(c, j)]; }
  size_t bytes(int c, int j) const {
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    return n == 0 ? 0 : ops_.packet_bytes(off, n);
  }
  void park() { mem_.park(); }

 private:
  size_t idx(int c, int j) const {
    return static_cast<size_t>(c) * static_cast<size_t>(slices_) + static_cast<size_t>(j);
  }
  const RingPlan& plan_;
  const SliceOps& ops_;
  int slices_;
  std::vector<size_t> offset_;
  size_t total_ = 0;
  PacketBuf mem_;
};

// The ring steps of one slice, named as NCCL's runRing names them. Step i (0 .. 2P-2) works on
// chunk (rank - i) mod P: it receives that chunk's packet from the left neighbour (all but
// kSend), does its codec work, and sends the chunk's packet to the right neighbour (all but kRecv).
enum class StepKind {
  kSend,             // 0: encode this rank's own chunk, send it
  kRecvReduceSend,   // 1 .. P-2: add this rank's part to the received partial sum, send the sum
  kRecvReduceFinal,  // P-1: the same, the sum now complete: into the final packets, sent on
  kRecvCopySend,     // P .. 2P-3: keep the received reduced packet (final packets), forward it
  kRecv,             // 2P-2: keep the last reduced packet; then the lane decodes every chunk
};

struct RingStep {
  StepKind kind;
  int chunk;
};

// Its received packet is a partial sum, to be reduced (else a reduced one, kept as it is).
bool reduces(StepKind kind) {
  return kind == StepKind::kRecvReduceSend || kind == StepKind::kRecvReduceFinal;
}
// It sends a final packet (else the lane's own `out`); a reduction writes its sum there.
bool sends_final(StepKind kind) {
  return kind == StepKind::kRecvReduceFinal || kind == StepKind::kRecvCopySend;
}

// Step i of rank r in a ring of p. The reduce-scatter alone (`scatter`) works one chunk later, so
// that its last step, kRecvReduceFinal, completes chunk r at rank r (NCCL's layout).
RingStep ring_step(int i, int r, int p, bool scatter) {
  StepKind kind = StepKind::kRecvCopySend;
  if (i == 0) {
    kind = StepKind::kSend;
  } else if (i < p - 1) {
    kind = StepKind::kRecvReduceSend;
  } else if (i == p - 1) {
    kind = StepKind::kRecvReduceFinal;
  } else if (i == 2 * (p - 1)) {
    kind = StepKind::kRecv;
  }
  return RingStep{kind, mod(r - i - (scatter ? 1 : 0), p)};
}

// One slice lane: walks slice j through the ring steps. Step i's send and step i + 1's receive
// travel together, as transfer i (both tagged i): the lane posts them once step i's codec work
// is done, and does step i + 1's once both completed.
struct Lane {
  int j = -1;
  int step = 0;  // ring step whose send (and the next step's receive) is posted or due
  bool send_active = false;
  bool recv_active = false;
  uint64_t ticket = 0;  // codec work in flight (SliceOps::test); post() follows its completion
  PacketBuf in;         // a reduce step's received partial sum
  PacketBuf out;        // kSend's and kRecvReduceSend's packet to send
};

// The ring's shape over the Exchange: which packet goes where at each step, and the codec work
// between; the Exchange does the transfers, the waiting and the errors of both.
class RingRun {
 public:
  RingRun(const CommLink& link, RingPlan plan, bool scatter, SliceOps& ops, RingStats* st)
      : link_(link),
        ex_(link, "the ring"),
        plan_(std::move(plan)),
        scatter_(scatter),
        ops_(ops),
        stats_(st),
        final_(plan_, link.nranks, ops) {}

  Status run(int depth) {
    SCCL_RETURN_IF_ERROR(final_.allocate(ops_));
    const int s = plan_.max_slices();
    if (link_.nranks == 1) {
      for (int j = 0; j < s; ++j)
        SCCL_RETURN_IF_ERROR(round_trip(j));
      return Status::Ok();
    }
    lanes_ = std::vector<Lane>(static_cast<size_t>(depth < 1 ? 1 : depth));
    return run_lanes();
  }

  // After the last decode_start: waits for decodes still running (SliceOps::flush).
  Status flush_decodes() {
    return ex_.wait_local([this](bool* done) { return ops_.flush(done); }, "its own decodes");
  }

  // The call failed: closes the transport (the ranks are out of step, and nothing may write into
  // the packets any more), then lets codec work still in flight (lanes' encodes and reductions,
  // decodes) end before the buffers go, its errors no longer mattering. If some does not end
  // (abort, timeout), the buffers are parked, never freed.
  void fail() {
    ex_.fail();
    auto codec_ended = [this](bool* done) {
      *done = false;
      for (Lane& lane : lanes_) {
        bool ended = false;
        if (lane.ticket != 0 && (!ops_.test(lane.ticket, &ended).ok() || ended)) lane.ticket = 0;
        if (lane.ticket != 0) return Status::Ok();  // still running
      }
      (void)ops_.flush(done);
      return Status::Ok();
    };
    if (ex_.wait_local(codec_ended, "its codec work after a failure").ok()) return;
    SCCL_WARN(kLogColl,
              "rank %d: codec work still running after a failure; its packet memory "
              "is left allocated",
              link_.rank);
    for (Lane& lane : lanes_) {
      lane.in.park();
      lane.out.park();
    }
    final_.park();
  }

 private:
  // Each pass: takes what the Exchange completed, tests the lanes' codec work, and moves every
  // lane whose transfers are done on to its next step.
  Status run_lanes() {
    const int s = plan_.max_slices();
    int next_j = 0;
    int done = 0;
    for (Lane& lane : lanes_) {
      if (next_j < s) SCCL_RETURN_IF_ERROR(start(lane, next_j++));
    }
    std::vector<Completion> completions;
    while (done < s) {
      completions.clear();
      SCCL_RETURN_IF_ERROR(ex_.poll(&completions));
      bool moved = !completions.empty();
      for (const Completion& c : completions) {
        Lane& lane = lanes_[static_cast<size_t>(c.note.cookie)];
        (c.recv ? lane.recv_active : lane.send_active) = false;
        if (c.recv && stats_ != nullptr) stats_->bytes_received += c.bytes;
      }
      for (Lane& lane : lanes_) {
        if (lane.j < 0) continue;
        if (lane.ticket != 0) {
          bool computed = false;
          Status st = ops_.test(lane.ticket, &computed);
          if (!st.ok()) {
            lane.ticket = 0;  // spent: test reported its end
            return ex_.annotate(st, "codec work on this rank", note_of(lane));
          }
          if (!computed) continue;
          lane.ticket = 0;
          ex_.progressed();
          moved = true;
          SCCL_RETURN_IF_ERROR(post(lane));
          continue;
        }
        if (lane.send_active || lane.recv_active) continue;
        moved = true;
        SCCL_RETURN_IF_ERROR(advance(lane));
        if (lane.j < 0) {
          ++done;
          if (next_j < s) SCCL_RETURN_IF_ERROR(start(lane, next_j++));
        }
      }
      if (!moved) SCCL_RETURN_IF_ERROR(ex_.idle(/*local_work=*/codec_pending()));
    }
    return Status::Ok();
  }

  bool codec_pending() const {
    for (const Lane& lane : lanes_) {
      if (lane.j >= 0 && lane.ticket != 0) return true;
    }
    return false;
  }

  RingStep step_of(int i) const { return ring_step(i, link_.rank, link_.nranks, scatter_); }
  // The lane's place, for errors; its index comes back in its transfers' completions.
  TransferNote note_of(const Lane& lane) const {
    TransferNote note;
    note.slice = lane.j;
    note.step = lane.step;
    note.cookie = static_cast<int>(&lane - lanes_.data());
    return note;
  }

  // Alone: the codec's own round trip, so one rank sees what P ranks would.
  Status round_trip(int j) {
    size_t off = 0, n = 0;
    plan_.slice(0, j, &off, &n);
    uint8_t* pkt = final_.at(0, j);
    SCCL_RETURN_IF_ERROR(ops_.encode(off, n, 0, pkt, final_.bytes(0, j)));
    return ops_.decode_start(off, n, pkt, final_.bytes(0, j));
  }

  // kSend: encodes this rank's own chunk, then posts transfer 0.
  Status start(Lane& lane, int j) {
    lane.j = j;
    lane.step = 0;
    const int c = step_of(0).chunk;
    size_t off = 0, n = 0;
    plan_.slice(c, j, &off, &n);
    SCCL_RETURN_IF_ERROR(lane.out.resize(ops_, final_.bytes(c, j)));
    if (n > 0) {
      SCCL_RETURN_IF_ERROR(
          ops_.encode_start(off, n, 0, lane.out.data(), lane.out.size(), &lane.ticket));
    }
    return lane.ticket != 0 ? Status::Ok() : post(lane);
  }

  // Posts transfer lane.step: the receive of the next step, and the send of this one. The
  // reduce-scatter's kRecvReduceFinal sends nothing: its chunk is this rank's, decoded here.
  Status post(Lane& lane) {
    const int p = link_.nranks;
    if (scatter_ && lane.step == p - 1) return finish(lane);
    const int left = mod(link_.rank - 1, p), right = mod(link_.rank + 1, p);
    const uint64_t tag = ring_tag(link_.op_seq, link_.phase, lane.step, lane.j);
    const TransferNote note = note_of(lane);
    const RingStep next = step_of(lane.step + 1), cur = step_of(lane.step);
    const size_t rbytes = final_.bytes(next.chunk, lane.j);
    if (rbytes > 0) {
      uint8_t* dst;
      if (reduces(next.kind)) {
        SCCL_RETURN_IF_ERROR(lane.in.resize(ops_, rbytes));
        dst = lane.in.data();
      } else {
        dst = final_.at(next.chunk, lane.j);
      }
      SCCL_RETURN_IF_ERROR(ex_.recv(left, tag, dst, rbytes, note));
      lane.recv_active = true;
    }
    const size_t sbytes = final_.bytes(cur.chunk, lane.j);
    if (sbytes > 0) {
      const uint8_t* src = sends_final(cur.kind) ? final_.at(cur.chunk, lane.j) : lane.out.data();
      SCCL_RETURN_IF_ERROR(ex_.send(right, tag, src, sbytes, note));
      lane.send_active = true;
      if (stats_ != nullptr) stats_->bytes_sent += sbytes;
    }
    return Status::Ok();
  }

  // Transfer lane.step is complete: does the next step's codec work and posts its transfer, or,
  // after kRecv, decodes the lane's slice of every chunk.
  Status advance(Lane& lane) {
    const int i = lane.step + 1;
    const RingStep s = step_of(i);
    switch (s.kind) {
      case StepKind::kRecvReduceSend:
      case StepKind::kRecvReduceFinal:
        SCCL_RETURN_IF_ERROR(reduce_step(lane, i, s));
        break;
      case StepKind::kRecvCopySend:
        break;  // received into the final packets, sent on from there
      case StepKind::kRecv:
        return finish(lane);
      case StepKind::kSend:
        return Status(Code::kInternalError, "ring: kSend after a transfer");
    }
    lane.step = i;
    // With the reduction still running, the loop posts the transfer once it completes.
    return lane.ticket != 0 ? Status::Ok() : post(lane);
  }

  // The received partial sum of the step's chunk, plus this rank's slice of it.
  Status reduce_step(Lane& lane, int i, const RingStep& s) {
    size_t off = 0, n = 0;
    plan_.slice(s.chunk, lane.j, &off, &n);
    if (n == 0) return Status::Ok();
    const size_t cap = final_.bytes(s.chunk, lane.j);
    uint8_t* dst;
    if (sends_final(s.kind)) {
      dst = final_.at(s.chunk, lane.j);
    } else {
      SCCL_RETURN_IF_ERROR(lane.out.resize(ops_, cap));
      dst = lane.out.data();
    }
    Status st = ops_.step_start(off, n, i, lane.in.data(), lane.in.size(), dst, cap, &lane.ticket);
    if (!st.ok()) return ex_.annotate(st, "ring step on a received packet", note_of(lane));
    return Status::Ok();
  }

  // The lane's slice is final (of every chunk; of this rank's alone in the reduce-scatter):
  // decodes it into the output and frees the lane.
  Status finish(Lane& lane) {
    for (int c = 0; c < link_.nranks; ++c) {
      size_t off = 0, n = 0;
      plan_.slice(c, lane.j, &off, &n);
      if (n == 0 || (scatter_ && c != link_.rank)) continue;
      Status st = ops_.decode_start(off, n, final_.at(c, lane.j), final_.bytes(c, lane.j));
      if (!st.ok()) return ex_.annotate(st, "decode of a reduced packet", note_of(lane));
    }
    lane.j = -1;
    return Status::Ok();
  }

  const CommLink& link_;
  Exchange ex_;  // every transfer of the ring, and every wait
  RingPlan plan_;
  bool scatter_;  // the reduce-scatter half alone (ring_reduce_scatter)
  SliceOps& ops_;
  RingStats* stats_;
  FinalPackets final_;
  std::vector<Lane> lanes_;
};

}  // namespace

RingPlan::RingPlan(size_t count, int nranks, size_t slice_elems, size_t align)
    : count_(count),
      nranks_(nranks),
      slice_elems_(slice_elems == 0 ? 1 : slice_elems),
      align_(align == 0 ? 1 : align) {
  slice_elems_ = (slice_elems_ + align_ - 1) / align_ * align_;
  max_slices_ = 0;
  for (int c = 0; c < nranks_; ++c)
    max_slices_ = std::max(max_slices_, slices(c));
}

RingPlan::RingPlan(std::vector<size_t> bounds, size_t slice_elems)
    : count_(bounds.empty() ? 0 : bounds.back()),
      nranks_(bounds.empty() ? 1 : static_cast<int>(bounds.size()) - 1),
      slice_elems_(slice_elems == 0 ? 1 : slice_elems),
      bounds_(std::move(bounds)) {
  max_slices_ = 0;
  for (int c = 0; c < nranks_; ++c)
    max_slices_ = std::max(max_slices_, slices(c));
}

size_t RingPlan::chunk_offset(int c) const {
  if (!bounds_.empty()) return bounds_[static_cast<size_t>(c)];
  if (align_ == 1) {
    // The first count % P chunks hold one element more; no product can overflow.
    const size_t q = count_ / static_cast<size_t>(nranks_);
    const size_t r = count_ % static_cast<size_t>(nranks_);
    const size_t uc = static_cast<size_t>(c);
    return uc * q + std::min(uc, r);
  }
  // In units of align_ elements: the last units % P chunks hold one unit more, the last of them
  // the partial unit that ends at count, so chunks differ by at most align_ elements.
  const size_t p = static_cast<size_t>(nranks_);
  const size_t units = (count_ + align_ - 1) / align_;
  const size_t q = units / p;
  const size_t r = units % p;
  const size_t uc = static_cast<size_t>(c);
  const size_t extra = uc + r > p ? uc + r - p : 0;
  return std::min(count_, (uc * q + extra) * align_);
}

int RingPlan::slices(int c) const {
  return static_cast<int>((chunk_len(c) + slice_elems_ - 1) / slice_elems_);
}

void RingPlan::slice(int c, int j, size_t* offset, size_t* n) const {
  const size_t len = chunk_len(c);
  const size_t start = static_cast<size_t>(j) * slice_elems_;
  *offset = chunk_offset(c) + start;
  *n = start >= len ? 0 : std::min(slice_elems_, len - start);
}

// Tag fields, high to low: op | phase | step | slice; the transport must carry kRingTagBits
// (checked per call against its properties). Operations of a communicator run one at a time
// and consume all their messages, so op wraps safely.
constexpr int kTagSliceBits = 19, kTagStepBits = 12, kTagPhaseBits = 5, kTagOpBits = 8;
static_assert(kTagSliceBits + kTagStepBits + kTagPhaseBits + kTagOpBits == kRingTagBits,
              "ring tag fields must fill kRingTagBits");
// A ring of P ranks runs 2 (P - 1) steps, each named in kTagStepBits.
constexpr int kMaxRanks = 1 << (kTagStepBits - 1);
constexpr int kMaxSlices = (1 << kTagSliceBits) - 1;
static_assert(kMaxRanks == kRingMaxRanks && kMaxSlices == kRingMaxSlices, "ring.h's limits");

int ring_step_chunk(int step, int rank, int nranks, bool scatter) {
  return ring_step(step, rank, nranks, scatter).chunk;
}

uint64_t ring_tag(uint32_t op_seq, uint8_t phase, int step, int slice) {
  constexpr uint64_t kOpMask = (1u << kTagOpBits) - 1, kPhaseMask = (1u << kTagPhaseBits) - 1;
  constexpr uint64_t kStepMask = (1u << kTagStepBits) - 1, kSliceMask = (1u << kTagSliceBits) - 1;
  return ((op_seq & kOpMask) << (kTagPhaseBits + kTagStepBits + kTagSliceBits)) |
         ((phase & kPhaseMask) << (kTagStepBits + kTagSliceBits)) |
         ((static_cast<uint64_t>(step) & kStepMask) << kTagSliceBits) |
         (static_cast<uint64_t>(slice) & kSliceMask);
}

namespace {

// Both rings: checks, runs, and on failure closes the transport and lets codec work end.
Status run_ring(const CommLink& link, RingPlan plan, bool scatter, int depth, SliceOps& ops,
                RingStats* stats) {
  SCCL_RETURN_IF_ERROR(check_link(link, "ring"));
  if (link.nranks > kMaxRanks) {
    return errorf(Code::kInvalidUsage, "ring: %d ranks exceed the %d the tags can name",
                  link.nranks, kMaxRanks);
  }
  if (link.nranks > 1 && link.transport->properties().tag_bits < kRingTagBits) {
    return errorf(Code::kInvalidUsage,
                  "ring: its tags need %d bits but the %s transport carries only %d", kRingTagBits,
                  link.transport->name(), link.transport->properties().tag_bits);
  }
  if (plan.max_slices() > kMaxSlices) {
    return errorf(Code::kInvalidUsage,
                  "ring: %d slices per chunk exceed 2^20; raise "
                  "SKETCHCCL_SLICE_BYTES",
                  plan.max_slices());
  }
  RingRun run(link, std::move(plan), scatter, ops, stats);
  Status st = run.run(depth);
  if (st.ok()) st = run.flush_decodes();
  // A failed ring leaves receives posted into buffers `run` is about to free, and the ranks out
  // of step: the communicator is finished.
  if (!st.ok()) run.fail();
  return st;
}

}  // namespace

Status ring_allreduce(const CommLink& link, size_t count, size_t slice_elems, int depth,
                      SliceOps& ops, RingStats* stats) {
  if (count == 0) return Status::Ok();
  if (link.nranks < 1) return errorf(Code::kInternalError, "ring: %d ranks", link.nranks);
  return run_ring(link, RingPlan(count, link.nranks, slice_elems, kRingChunkAlign), false, depth,
                  ops, stats);
}

Status ring_reduce_scatter(const CommLink& link, size_t count, size_t slice_elems, int depth,
                           SliceOps& ops, RingStats* stats, const std::vector<size_t>* bounds) {
  if (count == 0) return Status::Ok();
  if (link.nranks < 1) return errorf(Code::kInternalError, "ring: %d ranks", link.nranks);
  if (bounds == nullptr) {
    return run_ring(link, RingPlan(count, link.nranks, slice_elems), true, depth, ops, stats);
  }
  if (bounds->size() != static_cast<size_t>(link.nranks) + 1 || bounds->front() != 0 ||
      bounds->back() != count || !std::is_sorted(bounds->begin(), bounds->end())) {
    return Status(Code::kInternalError, "ring: chunk bounds do not cut the count");
  }
  return run_ring(link, RingPlan(*bounds, slice_elems), true, depth, ops, stats);
}

Status ring_allgather_small(const CommLink& link, const void* mine, size_t bytes, void* all) {
  uint8_t* out = static_cast<uint8_t*>(all);
  std::memcpy(out + static_cast<size_t>(link.rank) * bytes, mine, bytes);
  const int p = link.nranks;
  if (p == 1) return Status::Ok();
  const int left = (link.rank - 1 + p) % p, right = (link.rank + 1) % p;
  Exchange ex(link, "a small exchange");
  // Step s forwards the block of rank (rank - s) to the right.
  for (int s = 0; s < p - 1; ++s) {
    const int send_block = (link.rank - s + p) % p;
    const int recv_block = (link.rank - s - 1 + p) % p;
    const uint64_t tag = ring_tag(link.op_seq, link.phase, s, 0);
    TransferNote note;
    note.step = s;
    SCCL_RETURN_IF_ERROR(
        ex.recv(left, tag, out + static_cast<size_t>(recv_block) * bytes, bytes, note));
    SCCL_RETURN_IF_ERROR(
        ex.send(right, tag, out + static_cast<size_t>(send_block) * bytes, bytes, note));
    SCCL_RETURN_IF_ERROR(ex.wait_all());
  }
  return Status::Ok();
}

}  // namespace sketchccl::coll
