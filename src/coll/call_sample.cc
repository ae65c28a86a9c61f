#include "src/coll/call_sample.h"

#include <algorithm>
#include <cstddef>

#include "kernels/sparse.h"
#include "src/coll/accuracy.h"
#include "src/coll/agreement.h"
#include "src/coll/oom.h"
#include "src/coll/ring_phase.h"
#include "src/core/log.h"

namespace sketchccl::coll {

namespace {
constexpr size_t kBlock = 4096;  // elements per entry of before_block_
}  // namespace

Status CallSample::take(const PlanCall& c, bool lazily) {
  const size_t count = c.args.count;
  const size_t stride = c.shape.sample_stride();
  SCCL_RETURN_IF_ERROR(run_caught("the accuracy sample's bitmap", [&] {
    sample_bitmap(c.settings.seed, c.link.op_seq, count, &bits_, stride);
    if (lazily) {
      before_block_.assign(count / kBlock + 1, 0);
      for (size_t b = 1; b < before_block_.size(); ++b) {
        before_block_[b] = before_block_[b - 1] +
                           kernels::bitmap_count_range(bits_.data(), (b - 1) * kBlock, b * kBlock);
      }
    }
    return Status::Ok();
  }));
  SCCL_RETURN_IF_ERROR(
      alloc_vector(&own_, sample_count(count, stride), "accuracy sample's values"));
  taken_ = true;
  lazy_ = lazily;
  be_ = &c.be;
  send_ = static_cast<const uint8_t*>(c.args.send);
  type_ = c.args.type;
  count_ = count;
  if (lazily) return Status::Ok();
  return c.be.sparse_compact(bits_.data(), count, c.args.send, c.args.type, own_.data(), nullptr);
}

Status CallSample::fill(size_t offset, size_t n) {
  if (!lazy_ || offset >= count_) return Status::Ok();
  n = std::min(n, count_ - offset);
  const size_t b = offset / kBlock;
  const size_t first = before_block_[b] + samples_in(b * kBlock, offset);
  // The range's bits from bit 0, for the compaction of its elements alone.
  const size_t words = (n + 63) / 64;
  range_bits_.assign(words, 0);
  const size_t sh = offset % 64;
  for (size_t w = 0; w < words; ++w) {
    const size_t at = offset / 64 + w;
    uint64_t v = bits_[at] >> sh;
    if (sh != 0 && at + 1 < bits_.size()) v |= bits_[at + 1] << (64 - sh);
    range_bits_[w] = v;
  }
  if (n % 64 != 0) range_bits_[words - 1] &= (uint64_t(1) << (n % 64)) - 1;
  return be_->sparse_compact(range_bits_.data(), n, send_ + offset * kernels::elem_size(type_),
                             type_, own_.data() + first, nullptr);
}

Status CallSample::carry(SampleCarry** out) {
  *out = nullptr;
  if (!taken_) return Status::Ok();
  SCCL_RETURN_IF_ERROR(alloc_vector(&exact_, own_.size(), "accuracy sample's exact sums"));
  carry_.bits = bits_.data();
  carry_.own = own_.data();
  carry_.exact = exact_.data();
  carry_.m = own_.size();
  *out = &carry_;
  return Status::Ok();
}

size_t CallSample::samples_in(size_t begin, size_t end) const {
  return kernels::bitmap_count_range(bits_.data(), begin, end);
}

Status CallSample::output_samples(const PlanCall& c, float* out) const {
  const size_t rc = c.shape.out_count(c.args.count, c.link);
  const size_t first = c.shape.out_first(c.args.count, c.link);
  auto sampled = [this](size_t i) { return (bits_[i / 64] >> (i % 64)) & 1u; };
  const size_t before = samples_in(0, first);  // samples ahead of the output
  std::vector<uint64_t> out_bits((rc + 63) / 64, 0);
  for (size_t i = 0; i < rc; ++i) {
    if (sampled(first + i)) out_bits[i / 64] |= uint64_t(1) << (i % 64);
  }
  return c.be.sparse_compact(out_bits.data(), rc, c.args.recv, c.args.type, out + before, nullptr);
}

Status CallSample::estimate_by_values(PlanCall& c, bool carried, AccuracyEstimate* e) {
  const size_t m = own_.size();
  // The side ring's input: this rank's values at the sample, then (where each rank decoded only
  // its own output) its decoded values at the samples of its output, zero elsewhere. Its fp32
  // sums, the same bits on every rank (a `none` ring), are the exact values and, since one rank
  // alone holds each decoded value, every decoded value at the sample.
  const bool whole = c.shape.whole_result();
  std::vector<float> side_in(own_), sums(whole ? m : 2 * m), decoded(m);
  if (whole) {
    SCCL_RETURN_IF_ERROR(c.be.sparse_compact(bits_.data(), c.args.count, c.args.recv, c.args.type,
                                             decoded.data(), nullptr));
  } else {
    side_in.resize(2 * m, 0.0f);
    SCCL_RETURN_IF_ERROR(output_samples(c, side_in.data() + m));
  }
  if (carried && whole && exact_.size() == m) {
    sums = exact_;
  } else {
    RingStats rs;
    Status st = exact_sum_ring(c.link, kPhaseAccuracySample, c.host, c.settings, side_in.data(),
                               sums.data(), side_in.size(), &rs);
    c.cs.sample_bytes_sent += rs.bytes_sent;
    SCCL_RETURN_IF_ERROR(st);
  }
  std::vector<float> exact(sums.begin(), sums.begin() + static_cast<std::ptrdiff_t>(m));
  if (!whole) decoded.assign(sums.begin() + static_cast<std::ptrdiff_t>(m), sums.end());
  if (c.args.avg) {
    const float scale = 1.0f / static_cast<float>(c.link.nranks);
    for (float& v : exact)
      v *= scale;
  }
  *e = estimate_accuracy(decoded.data(), exact.data(), m);
  return Status::Ok();
}

Status CallSample::estimate_by_tallies(PlanCall& c, AccuracyEstimate* e) {
  const size_t m = own_.size(), count = c.args.count;
  const auto p = static_cast<size_t>(c.link.nranks);
  const size_t rc = c.shape.out_count(count, c.link);
  const size_t first = c.shape.out_first(count, c.link);
  if (exact_.size() != m || rc * p != count) {
    return Status(Code::kInternalError, "a carried sample's chunks do not cut the count");
  }
  // This rank's chunk: what its output holds at the samples (the decoded sum, scaled and in the
  // output's type) against the exact sums the schedule left (rank order, fp32; scaled alike).
  std::vector<float> decoded(m, 0.0f);
  SCCL_RETURN_IF_ERROR(output_samples(c, decoded.data()));
  const size_t before = samples_in(0, first), k = samples_in(first, first + rc);
  std::vector<float> exact(exact_.begin() + static_cast<std::ptrdiff_t>(before),
                           exact_.begin() + static_cast<std::ptrdiff_t>(before + k));
  if (c.args.avg) {
    const float scale = 1.0f / static_cast<float>(c.link.nranks);
    for (float& v : exact)
      v *= scale;
  }
  const SampleTally mine = tally_samples(decoded.data() + before, exact.data(), k);
  // One round: every owner's tally straight to every rank, so every rank combines the same P
  // tallies in rank order into the same bits.
  std::vector<SampleTally> all(p);
  CommLink l = c.link;
  l.phase = kPhaseAccuracyTally;
  c.cs.sample_bytes_sent += (p - 1) * sizeof mine;
  SCCL_RETURN_IF_ERROR(allgather_direct(l, &mine, sizeof mine, all.data(),
                                        "the accuracy tallies of a two-shot ReduceScatter"));
  for (size_t q = 0; q < p; ++q) {
    const SampleTally& t = all[q];
    const size_t want = samples_in(q * rc, (q + 1) * rc);
    // Every rank knows how many samples each chunk holds; negative energies are no tally.
    if (t.samples != want || t.err < 0 || t.ref < 0 || t.max_err < 0 || t.max_ref < 0) {
      return errorf(Code::kInvalidUsage,
                    "rank %d received a malformed accuracy tally from rank %zu (%llu samples, "
                    "expected %zu): the ranks run different versions or calls",
                    c.link.rank, q, static_cast<unsigned long long>(t.samples), want);
    }
  }
  *e = estimate_of(all.data(), all.size());
  return Status::Ok();
}

Status CallSample::estimate(PlanCall& c, bool carried) {
  AccuracyEstimate e;
  if (carried && !c.shape.whole_result()) {
    SCCL_RETURN_IF_ERROR(estimate_by_tallies(c, &e));
  } else {
    SCCL_RETURN_IF_ERROR(estimate_by_values(c, carried, &e));
  }
  const size_t m = own_.size();
  CodecStats& cs = c.cs;
  cs.estimated_calls++;
  cs.estimated_nmse_sum += e.nmse;
  cs.estimated_maxrel_sum += e.maxrel;
  cs.estimated_nmse_worst = std::max(cs.estimated_nmse_worst, e.nmse);
  cs.estimated_maxrel_worst = std::max(cs.estimated_maxrel_worst, e.maxrel);
  SCCL_INFO(kLogColl,
            "%s #%u of %zu elements with %s: estimated NMSE %.3g, max rel %.3g (%zu samples)",
            c.shape.name(), c.link.op_seq, c.args.count, kernels::codec_name(c.codec), e.nmse,
            e.maxrel, m);
  const double bound = c.settings.max_nmse;
  if (guard_step_up(bound, c.codec, e.nmse, &c.state.guard)) {
    cs.guard_steps++;
    SCCL_WARN(kLogColl,
              "buffer %p of %zu elements: estimated NMSE %.3g above SKETCHCCL_MAX_NMSE=%g, "
              "%s -> %s from the next call",
              c.args.send, c.args.count, e.nmse, bound, kernels::codec_name(c.codec),
              kernels::codec_name(safer_codec(c.codec)));
  }
  return Status::Ok();
}

}  // namespace sketchccl::coll
