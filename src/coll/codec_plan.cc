#include "src/coll/codec_plan.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kernels/sparse.h"
#include "src/coll/oom.h"
#include "src/coll/s2_repair.h"
#include "src/coll/support_encoding.h"

namespace sketchccl::coll {
namespace {

using kernels::CodecId;
using kernels::CodecParams;
using kernels::ElemType;

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

// The user's buffers as the ring's element space: this rank's output starts at its out_first.
SliceBuffers user_buffers(const PlanCall& c) {
  SliceBuffers b;
  b.send = c.args.send;
  b.recv = c.args.recv;
  b.recv_first = c.shape.out_first(c.args.count, c.link);
  b.type = c.args.type;
  return b;
}

// The linear family (none, the casts, q*): the codec's ring over the user's buffers, nothing
// before or after it. CASQ and s2 are this with more around it.
class CodecRingPlan : public CodecPlan {
 public:
  Feedback feedback(const PlanCall& c) const override {
    return kernels::codec_info(c.codec)->lossy_step ? Feedback::kPerStep : Feedback::kNone;
  }
  bool exact(const PlanCall& c) const override { return !kernels::codec_info(c.codec)->lossy; }
  bool streams() const override { return true; }
  Status ring(PlanCall& c, ShapeJob* job) override {
    ops_.emplace(c.be, params(c), user_buffers(c), c.scale);
    job->stage = Stage::kData;
    job->count = c.args.count;
    job->ops = &*ops_;
    return Status::Ok();
  }
  CodecSliceOps* feedback_target() override { return ops_ ? &*ops_ : nullptr; }
  void record(PlanCall& c) override {
    // Where every rank decoded every chunk, the decoded non-zeros are agreed. A ReduceScatter's
    // ranks decode different chunks: its history stays the last agreed one (its sparse runs').
    if (!c.shape.whole_result()) return;
    c.state.have_history = true;
    c.state.nonzeros = ops_->decode_stats().nonzeros;
    c.state.s2_slices = S2SliceSupport{};
    c.state.support_rows = 0;  // a codec ring's result measures no rows
  }

 protected:
  virtual CodecParams params(const PlanCall& c) const {
    CodecParams p;
    p.codec = c.codec;
    p.seed = c.settings.seed;
    p.call = c.link.op_seq;
    p.s2_rows = c.settings.s2_rows;
    return p;
  }
  std::optional<CodecSliceOps> ops_;
};

// CASQ: the codec ring, rounding to the nearest level when error feedback carries the rounding
// bias to the next call (less error per step); without, stochastic rounding keeps it unbiased.
class CasqPlan : public CodecRingPlan {
 protected:
  CodecParams params(const PlanCall& c) const override {
    CodecParams p = CodecRingPlan::params(c);
    p.casq_nearest = c.residual != nullptr;
    return p;
  }
};

// s2 counters per row for the slice [offset, offset + n): the first call's budget, then from that
// slice's support in the previous call (s2_repair.h).
uint32_t s2_counters(const Settings& s, const BufferState& history, size_t count, size_t offset,
                     size_t n) {
  if (!history.have_history || count == 0) {
    return kernels::s2_counters_for_budget(n, s.s2_rows, s.s2_budget);
  }
  // This slice's support in the previous call (clustered supports vary between slices, and a
  // share of the total would leave some below the peeling threshold).
  return s2_slice_counters(history.s2_slices, history.nonzeros, count, offset, n, s.s2_rows,
                           s.s2_counters_per_nz);
}

// s2: the codec ring with each slice's sketch sized from the previous call, then the exact repair
// of what did not peel (unless SKETCHCCL_S2_REPAIR=0), or, lossy with error feedback, the residual
// kept where the output lost it.
class S2Plan : public CodecRingPlan {
 public:
  // Lossy s2 has feedback only where every rank decoded everything: a ReduceScatter's other ranks
  // never learn where a chunk lost values.
  Feedback feedback(const PlanCall& c) const override {
    return !c.settings.s2_repair && c.shape.whole_result() ? Feedback::kAtDecode : Feedback::kNone;
  }
  bool exact(const PlanCall& c) const override { return c.settings.s2_repair; }
  // The repair (or the lossy residual) reads and writes the buffers after the ring.
  bool streams() const override { return false; }
  Status before(PlanCall& c) override {
    const bool repair = c.settings.s2_repair;
    SCCL_RETURN_IF_ERROR(log_.reset(c.args.count, repair || c.residual != nullptr));
    // The repair reads this rank's input after the ring: an in-place call keeps its non-zeros.
    const size_t esz = kernels::elem_size(c.args.type);
    const size_t out = c.shape.out_count(c.args.count, c.link);
    if (repair && ranges_overlap(c.args.send, c.args.count * esz, c.args.recv, out * esz)) {
      SCCL_RETURN_IF_ERROR(s2_save_input(c.be, c.args.send, c.args.type, c.args.count, &saved_));
      saved_input_ = true;
    }
    return Status::Ok();
  }
  Status ring(PlanCall& c, ShapeJob* job) override {
    SCCL_RETURN_IF_ERROR(CodecRingPlan::ring(c, job));
    const Settings& s = c.settings;
    const BufferState& history = c.history;
    const size_t count = c.args.count;
    ops_->set_s2(&log_, [&s, &history, count](size_t offset, size_t n) {
      return s2_counters(s, history, count, offset, n);
    });
    return Status::Ok();
  }
  Status after(PlanCall& c) override {
    if (c.settings.s2_repair) {
      S2RepairCall call;
      call.be = &c.be;
      call.send = c.args.send;
      call.recv = c.args.recv;
      call.count = c.args.count;
      call.recv_first = c.shape.out_first(c.args.count, c.link);
      call.recv_count = c.shape.out_count(c.args.count, c.link);
      call.type = c.args.type;
      call.scale = c.scale;
      call.saved = saved_input_ ? &saved_ : nullptr;
      call.whole = c.shape.whole_result();
      S2RepairResult rep;
      const CommLink& link = c.link;
      backend::Backend& host = c.host;
      const Settings& s = c.settings;
      SCCL_RETURN_IF_ERROR(s2_repair(
          link, call, log_,
          [&link, &host, &s](uint8_t phase, const float* vals, float* sums, size_t m,
                             uint64_t* bytes) {
            RingStats rs;
            Status st = exact_sum_ring(link, phase, host, s, vals, sums, m, &rs);
            *bytes += rs.bytes_sent;
            return st;
          },
          &rep));
      c.cs.s2_repaired += rep.repaired;
      c.cs.s2_repair_bytes_sent += rep.bytes_sent;
      c.cs.bytes_sent += rep.bytes_sent;
    } else if (c.residual != nullptr) {
      double kept_sq = 0;
      SCCL_RETURN_IF_ERROR(s2_lossy_feedback(c.be, log_, c.args.recv, c.args.type, c.args.count,
                                             c.residual, &kept_sq));
      c.cs.ef_residual_sq += kept_sq;
    }
    return Status::Ok();
  }
  void record(PlanCall& c) override {
    const kernels::DecodeStats& ds = ops_->decode_stats();
    c.cs.s2_nonzeros += ds.nonzeros;
    c.cs.s2_peeled += ds.peeled;
    c.cs.s2_estimated += ds.estimated;
    CodecRingPlan::record(c);
    if (c.shape.whole_result()) c.state.s2_slices = log_.supports();
  }

 private:
  S2DecodeLog log_;
  S2SavedInput saved_;
  bool saved_input_ = false;
};

// `sparse`, lossless and two-phase: the ranks agree on the union of their supports (a ring of
// bitmaps or index lists, coll/support_encoding.h), then an exact fp32 ring runs over each rank's
// values on that support. Phase 1 and the compaction and scatter touch the user's buffers (`be`);
// the union bitmap and the values are host memory, so phase 2 always runs on the host backend.
class SparsePlan : public CodecPlan {
 public:
  Feedback feedback(const PlanCall&) const override { return Feedback::kNone; }
  bool exact(const PlanCall&) const override { return true; }
  Status before(PlanCall& c) override {
    const size_t count = c.args.count;
    SCCL_RETURN_IF_ERROR(alloc_vector<uint64_t>(&union_bits_, kernels::bitmap_bytes(count) / 8,
                                                "sparse union bitmap", 0));
    SupportArgs sa;
    sa.x = c.args.send;
    sa.type = c.args.type;
    sa.count = count;
    sa.encoding =
        choose_support(c.settings.cost_model(count, c.link.nranks), c.history.support_history());
    sa.prev_nonzeros = c.history.nonzeros;
    sa.slice_elems = c.settings.slice_elems;
    sa.depth = c.settings.depth;
    CommLink l1 = c.link;
    l1.phase = c.shape.phase(Stage::kSupport);
    Status st = agree_union_support(l1, c.be, sa, union_bits_.data(), &support_);
    c.cs.bytes_sent += support_.bytes_sent;
    c.cs.bytes_received += support_.bytes_received;
    c.cs.support_bytes_sent += support_.bytes_sent;
    c.cs.support_calls[static_cast<size_t>(support_.used)]++;
    c.cs.support_index_overflows += support_.index_overflow ? 1 : 0;
    SCCL_RETURN_IF_ERROR(st);
    SCCL_RETURN_IF_ERROR(c.host.bitmap_popcount(union_bits_.data(), count, &nonzeros_));
    SCCL_RETURN_IF_ERROR(alloc_vector(&values_, nonzeros_, "sparse index list's values"));
    SCCL_RETURN_IF_ERROR(alloc_vector(&sums_, nonzeros_, "sparse index list's sums"));
    return c.be.sparse_compact(union_bits_.data(), count, c.args.send, c.args.type, values_.data(),
                               nullptr);
  }
  // Phase 2: cut so that each rank's chunk of the values holds those of its own output.
  Status ring(PlanCall& c, ShapeJob* job) override {
    const std::string what = std::string("the sparse ") + c.shape.name() + "'s plan";
    SCCL_RETURN_IF_ERROR(run_caught(what.c_str(), [&] {
      subset_ = c.shape.subset_plan(union_bits_.data(), c.args.count, c.link);
      return Status::Ok();
    }));
    CodecParams base;
    base.codec = CodecId::kNone;
    base.seed = c.settings.seed;
    base.call = c.link.op_seq;
    SliceBuffers buf;
    buf.send = values_.data();
    buf.recv = sums_.data();
    ops_.emplace(c.host, base, buf, 1.0f);
    job->stage = Stage::kValues;
    job->count = nonzeros_;
    job->bounds = &subset_.bounds;
    job->ops = &*ops_;
    return Status::Ok();
  }
  Status after(PlanCall& c) override {
    return c.be.sparse_scatter(subset_.out_bits(union_bits_.data()), subset_.out_count,
                               sums_.data() + subset_.values_first, c.scale, c.args.recv,
                               c.args.type, nullptr);
  }
  void record(PlanCall& c) override {
    c.state.have_history = true;
    // A row bitmap's support holds the zeros of its rows: where every rank holds the same sums,
    // their non-zeros are the support the next call sizes itself by; a ReduceScatter's ranks hold
    // different chunks, so it keeps the rows' support.
    c.state.nonzeros = support_.used == SupportEncoding::kRowBitmap && c.shape.whole_result()
                           ? static_cast<uint64_t>(std::count_if(sums_.begin(), sums_.end(),
                                                                 [](float v) { return v != 0.0f; }))
                           : nonzeros_;
    c.state.support_rows = support_.rows;
  }

 private:
  std::vector<uint64_t> union_bits_;
  SupportOutcome support_;
  size_t nonzeros_ = 0;  // the union support
  std::vector<float> values_, sums_;
  SubsetPlan subset_;
  std::optional<CodecSliceOps> ops_;
};

}  // namespace

bool plan_reads_history(kernels::CodecFamily family, const Settings& settings) {
  switch (family) {
    case kernels::CodecFamily::kS2:
      return true;
    case kernels::CodecFamily::kSparse:
      return settings.sparse_support != SupportSetting::kElementBitmap;
    case kernels::CodecFamily::kLinear:
    case kernels::CodecFamily::kCasq:
      break;
  }
  return false;
}

std::unique_ptr<CodecPlan> make_plan(kernels::CodecFamily family) {
  switch (family) {
    case kernels::CodecFamily::kLinear:
      return std::make_unique<CodecRingPlan>();
    case kernels::CodecFamily::kCasq:
      return std::make_unique<CasqPlan>();
    case kernels::CodecFamily::kS2:
      return std::make_unique<S2Plan>();
    case kernels::CodecFamily::kSparse:
      return std::make_unique<SparsePlan>();
  }
  return nullptr;
}

}  // namespace sketchccl::coll
