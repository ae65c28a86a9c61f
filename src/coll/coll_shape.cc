#include "src/coll/coll_shape.h"

#include "kernels/sparse.h"
#include "src/coll/accuracy.h"
#include "src/coll/two_shot.h"

namespace sketchccl::coll {
namespace {

bool bit(const uint64_t* bits, size_t i) {
  return ((bits[i / 64] >> (i % 64)) & 1u) != 0;
}

CommLink on_phase(const CommLink& link, uint8_t phase) {
  CommLink l = link;
  l.phase = phase;
  return l;
}

// The ring carries no header or trailer (CollShape::carries): a job that asks for one was not
// asked of the shape first.
Status carries_nothing(const ShapeJob& job) {
  if (job.speculation != nullptr) {
    return Status(Code::kInternalError, "two-shot: a speculative call that runs the ring");
  }
  if (job.sample != nullptr) {
    return Status(Code::kInternalError, "a ring job that carries the accuracy sample");
  }
  return Status::Ok();
}

// Every rank gets every chunk: the ring of ring_allreduce, its chunks aligned for the codecs'
// 16-byte paths.
class AllReduceShape : public CollShape {
 public:
  CallKind kind() const override { return CallKind::kAllReduce; }
  size_t out_first(size_t, const CommLink&) const override { return 0; }
  size_t out_count(size_t count, const CommLink&) const override { return count; }
  bool whole_result() const override { return true; }
  uint8_t phase(Stage stage) const override { return kAllReducePhases[static_cast<size_t>(stage)]; }
  Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems, int depth,
             RingStats* stats) const override {
    SCCL_RETURN_IF_ERROR(carries_nothing(job));
    // Every rank decodes every chunk, so any cut of a subset serves.
    return ring_allreduce(on_phase(link, phase(job.stage)), job.count, slice_elems, depth, *job.ops,
                          stats);
  }
  SubsetPlan subset_plan(const uint64_t* bits, size_t count, const CommLink&) const override {
    (void)bits;
    SubsetPlan plan;
    plan.out_count = count;
    return plan;
  }
  size_t sample_stride() const override { return kSampleStride; }
};

// Rank r gets chunk r of P equal chunks (NCCL's layout): the reduce-scatter half of the ring.
class ReduceScatterShape : public CollShape {
 public:
  CallKind kind() const override { return CallKind::kReduceScatter; }
  size_t out_first(size_t count, const CommLink& link) const override {
    return static_cast<size_t>(link.rank) * (count / static_cast<size_t>(link.nranks));
  }
  size_t out_count(size_t count, const CommLink& link) const override {
    return count / static_cast<size_t>(link.nranks);
  }
  bool whole_result() const override { return false; }
  uint8_t phase(Stage stage) const override {
    return kReduceScatterPhases[static_cast<size_t>(stage)];
  }
  Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems, int depth,
             RingStats* stats) const override {
    SCCL_RETURN_IF_ERROR(carries_nothing(job));
    const bool cut = job.bounds != nullptr && !job.bounds->empty();
    return ring_reduce_scatter(on_phase(link, phase(job.stage)), job.count, slice_elems, depth,
                               *job.ops, stats, cut ? job.bounds : nullptr);
  }
  // Each rank's chunk of the input holds its run of the set positions.
  SubsetPlan subset_plan(const uint64_t* bits, size_t count, const CommLink& link) const override {
    const auto p = static_cast<size_t>(link.nranks);
    const size_t recvcount = count / p;
    SubsetPlan plan;
    plan.out_count = recvcount;
    plan.bounds.assign(p + 1, 0);
    size_t set = 0;
    for (size_t c = 0; c < p; ++c) {
      plan.bounds[c] = set;
      set += kernels::bitmap_count_range(bits, c * recvcount, (c + 1) * recvcount);
    }
    plan.bounds[p] = set;
    const size_t first = static_cast<size_t>(link.rank) * recvcount;
    plan.values_first = plan.bounds[static_cast<size_t>(link.rank)];
    plan.own_bits.assign((recvcount + 63) / 64, 0);
    for (size_t i = 0; i < recvcount; ++i) {
      if (bit(bits, first + i)) plan.own_bits[i / 64] |= uint64_t(1) << (i % 64);
    }
    plan.own = true;
    return plan;
  }
  // Its side ring carries two values per sample (input and decoded) next to half a ring of
  // packets: four times the share, so a four times sparser sample.
  size_t sample_stride() const override { return kScatterSampleStride; }
};

// The two-shot data stage of each kind: its scatter phase, and its run of a ShapeJob.
struct TwoShotAllReduce {
  static constexpr uint8_t kScatterPhase = kPhaseTwoShotScatter;
  static constexpr bool kAligned = true;  // ring_allreduce's cut
  static Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems,
                    RingStats* stats) {
    return two_shot_allreduce(link, kScatterPhase, kPhaseTwoShotGather, job.count, slice_elems,
                              *job.ops, stats, job.sample, job.speculation);
  }
};
struct TwoShotReduceScatter {
  static constexpr uint8_t kScatterPhase = kPhaseTwoShotScatterRs;
  static constexpr bool kAligned = false;  // the even cut
  static Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems,
                    RingStats* stats) {
    const bool cut = job.bounds != nullptr && !job.bounds->empty();
    return two_shot_reduce_scatter(link, kScatterPhase, job.count, slice_elems, *job.ops, stats,
                                   cut ? job.bounds : nullptr, job.speculation, job.sample);
  }
};

// `RingBase`'s shape with its data stage two-shot (`Data`): the ring's cut, output and other
// stages, and the ring itself where the slice operations keep no sums or a rank is alone.
template <typename RingBase, typename Data>
class TwoShotShape : public RingBase {
 public:
  Schedule schedule() const override { return Schedule::kTwoShot; }
  Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems, int depth,
             RingStats* stats) const override {
    if (!two_shot(job, link)) return RingBase::run(link, job, slice_elems, depth, stats);
    return Data::run(link, job, slice_elems, stats);
  }
  // Two-shot's messages reach every rank: the decision rides ahead of the data over the call's
  // own cut of all its elements; the sample behind it too, where each chunk is its owner's output
  // (an AllReduce's, or a ReduceScatter's even cut), for the exact sums or each owner's tally.
  Carries carries(const ShapeJob& job, size_t call_count, const CommLink& link) const override {
    Carries can;
    const bool own_cut = job.bounds == nullptr || job.bounds->empty();
    can.decision = two_shot(job, link) && job.count == call_count && own_cut;
    can.sample = can.decision &&
                 (this->whole_result() || call_count % static_cast<size_t>(link.nranks) == 0);
    return can;
  }
  Status drain_speculation(const CommLink& link, size_t count, size_t slice_elems,
                           const std::vector<int>& peers) const override {
    return two_shot_drain(on_phase(link, Data::kScatterPhase), Data::kScatterPhase,
                          two_shot_plan(Data::kAligned, count, link.nranks, slice_elems), peers);
  }

 private:
  // The data stage runs two-shot where the slice operations keep sums and a peer exists; else
  // the ring.
  static bool two_shot(const ShapeJob& job, const CommLink& link) {
    return job.stage == Stage::kData && job.ops->sums() && link.nranks > 1;
  }
};

}  // namespace

Carries CollShape::carries(const ShapeJob&, size_t, const CommLink&) const {
  return Carries{};
}

Status CollShape::drain_speculation(const CommLink&, size_t, size_t,
                                    const std::vector<int>& peers) const {
  if (peers.empty()) return Status::Ok();
  return errorf(Code::kInternalError, "the %s ring has no speculative schedule to drain", name());
}

const char* schedule_name(Schedule s) {
  return s == Schedule::kTwoShot ? "twoshot" : "ring";
}

const CollShape* coll_shape(CallKind kind, Schedule schedule) {
  static const AllReduceShape all_reduce;
  static const ReduceScatterShape reduce_scatter;
  static const TwoShotShape<AllReduceShape, TwoShotAllReduce> two_shot_all_reduce;
  static const TwoShotShape<ReduceScatterShape, TwoShotReduceScatter> two_shot_reduce_scatter;
  const bool two = schedule == Schedule::kTwoShot;
  switch (kind) {
    case CallKind::kAllReduce:
      return two ? static_cast<const CollShape*>(&two_shot_all_reduce) : &all_reduce;
    case CallKind::kReduceScatter:
      return two ? static_cast<const CollShape*>(&two_shot_reduce_scatter) : &reduce_scatter;
    case CallKind::kRail:
    case CallKind::kRailReduceScatter:
      break;
  }
  return nullptr;
}

}  // namespace sketchccl::coll
