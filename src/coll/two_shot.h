// The two-shot schedule of a compressed reduction (docs/engine.md): every contribution is
// quantized once and summed at full precision, so the error does not grow with the ranks.
//   1. reduce-scatter by all-to-all: rank r encodes its slice of chunk c and sends it straight to
//      rank c, which decodes the P - 1 packets of its chunk into an fp32 sum (in rank order) onto
//      its own contribution (an AllReduce's taken exact, a ReduceScatter's quantized like the
//      others, so that its error is the same at every P);
//   2. AllReduce: the owner encodes the sum once and sends that packet to every rank, which
//      forwards nothing and decodes every chunk's packet (every rank decodes the same packets,
//      the owner its own too, so every rank's result is the same bits). A ReduceScatter stops
//      after 1 and writes the sum, never quantized again.
// The same bytes on the wire as the ring; P - 1 messages per rank per phase, posted together.
// A shape over the one transfer layer (exchange.h): this file says what goes where (the packets'
// layout, the contributions, the sums); the Exchange owns the requests, their sizes, the waiting,
// the errors and the close on failure. What its messages carry besides the packets is the
// layer's too: the decision of a speculative call as a header ahead of them (DecisionHeader,
// Drops: agreement.h) and the accuracy sample as a trailer behind them (SampleTrailer: carry.h).
// Whether a call carries either, the shape says (CollShape::carries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/agreement.h"
#include "src/coll/ring.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// The codec parameters' ring step of each packet (their random streams): rank q's contribution,
// and the owner's sum.
constexpr int two_shot_contribution_step(int rank) {
  return 1 + rank;
}
constexpr int kTwoShotSumStep = 0;

// `ops` must keep sums (SliceOps::sums). An AllReduce cuts like ring_allreduce (kRingChunkAlign);
// a ReduceScatter like ring_reduce_scatter (the even cut, or `bounds`), rank r's chunk r its
// output. Tags: `scatter_phase` for 1, `gather_phase` for 2.
// `sample` (optional): the accuracy sample rides in the same messages, each rank's values at the
// positions of a slice after its contribution's packet, the owner's exact sums (in rank order)
// after its reduced packet, so every rank gets the same exact sums without a side ring. A
// ReduceScatter carries the values alike but sends no reduced packet: its owner keeps the exact
// sums of its own chunk's positions (in sample->exact) for its tally (call_sample.h).
// `spec` (optional): the decision goes to every rank first; a rank's contributions are received
// only once its decision is known to equal this rank's, and the reduced packets only once every
// rank's is; a slice is reduced (a ReduceScatter's output written) only with every peer's
// contribution in, so only after every decision arrived equal. Where one differs, the call ends
// with spec->disagreed (see Speculation).
Status two_shot_allreduce(const CommLink& link, uint8_t scatter_phase, uint8_t gather_phase,
                          size_t count, size_t slice_elems, SliceOps& ops, RingStats* stats,
                          SampleCarry* sample = nullptr, Speculation* spec = nullptr);
// The cut of two-shot's chunks for `count` elements among link.nranks (rank r's chunk r): an
// AllReduce's aligned like ring_allreduce, a ReduceScatter's even cut like ring_reduce_scatter.
RingPlan two_shot_plan(bool all_reduce, size_t count, int nranks, size_t slice_elems);
// Receives and drops the contributions that each of `peers` sent speculatively to this rank's
// chunk of `plan` (tags of `scatter_phase`), for a rank that did not speculate and found the
// decisions different: so that no message of the call is left behind.
Status two_shot_drain(const CommLink& link, uint8_t scatter_phase, const RingPlan& plan,
                      const std::vector<int>& peers);
// `sample`: as two_shot_allreduce's, on the even cut only (not with `bounds`).
Status two_shot_reduce_scatter(const CommLink& link, uint8_t scatter_phase, size_t count,
                               size_t slice_elems, SliceOps& ops, RingStats* stats,
                               const std::vector<size_t>* bounds = nullptr,
                               Speculation* spec = nullptr, SampleCarry* sample = nullptr);

}  // namespace sketchccl::coll
