// The shape of a taken-over reduction (docs/engine.md): how its ring cuts the elements into
// chunks, which of the reduced elements this rank's output holds, and the tag phase of each of
// the call's rings. What travels is the codec plan's business (codec_plan.h): a shape runs a
// plan's ring job with whatever SliceOps the plan supplies, as NCCL's runRing<T, RedOp, Proto>
// runs the ring's shape with the packet protocol as a parameter. Another schedule of the same
// reduction (say a two-shot reduce-scatter by all-to-all, then the ring's all-gather) is one more
// shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/reduction.h"
#include "src/coll/ring.h"
#include "src/coll/ring_phase.h"
#include "src/core/status.h"

namespace sketchccl::coll {

struct Speculation;  // agreement.h

// One ring of a codec plan: `count` elements of the stage's element space through `ops`.
struct ShapeJob {
  Stage stage = Stage::kData;
  size_t count = 0;
  // The chunks of a ring over a subset of the input (SubsetPlan::bounds); null or empty: the
  // shape's own cut of `count` elements.
  const std::vector<size_t>* bounds = nullptr;
  SliceOps* ops = nullptr;
  // The accuracy sample, carried as a trailer of the data's messages (carry.h): set by the engine
  // only where the shape says it carries it (CollShape::carries); null: the side ring after it.
  SampleCarry* sample = nullptr;
  // The call's decision, sent as a header ahead of the data (agreement.h: DecisionHeader): set
  // by the engine only where the shape says it carries it; null: agreed before the call.
  Speculation* speculation = nullptr;
};

// What a job's data messages can carry besides the packets, as the shape answers for it: the
// call's decision ahead of them (a speculative call) and the accuracy sample behind them.
struct Carries {
  bool decision = false;
  bool sample = false;
};

// A ring over the set positions of a bitmap of the input (the `sparse` values): how to cut it so
// that each rank's chunk holds the positions of its own output, and where those lie.
struct SubsetPlan {
  std::vector<size_t> bounds;  // P + 1 offsets into the set positions; empty: any cut
  size_t out_count = 0;        // elements of the output
  size_t values_first = 0;     // the first of the output's positions among the set positions
  // The set positions of this rank's output (bit 0: out_first): the input's bitmap itself, or
  // the output's own bits.
  bool own = false;
  std::vector<uint64_t> own_bits;
  const uint64_t* out_bits(const uint64_t* input_bits) const {
    return own ? own_bits.data() : input_bits;
  }
};

// How a shape schedules its data ring (SKETCHCCL_ALGO): the ring re-encodes the partial sum at
// every hop; two-shot (two_shot.h) quantizes each contribution once and sums in fp32, where the
// slice operations keep sums (SliceOps::sums), else it runs the ring.
enum class Schedule : uint8_t { kRing, kTwoShot };
const char* schedule_name(Schedule s);

class CollShape {
 public:
  virtual ~CollShape() = default;
  virtual CallKind kind() const = 0;
  virtual Schedule schedule() const { return Schedule::kRing; }
  const char* name() const { return call_kind_name(kind()); }

  // This rank's output: the reduced input elements [out_first, out_first + out_count), which the
  // receive buffer holds from its start.
  virtual size_t out_first(size_t count, const CommLink& link) const = 0;
  virtual size_t out_count(size_t count, const CommLink& link) const = 0;
  // Every rank decodes the whole result, so what the decodes count (non-zeros, s2's supports and
  // unresolved positions) is the same on every rank.
  virtual bool whole_result() const = 0;

  // The tag phase of a stage's ring.
  virtual uint8_t phase(Stage stage) const = 0;
  // Runs `job` on the phase of its stage (link.phase is ignored).
  virtual Status run(const CommLink& link, const ShapeJob& job, size_t slice_elems, int depth,
                     RingStats* stats) const = 0;
  // The plan of a ring over the set positions of `bits` (count bits).
  virtual SubsetPlan subset_plan(const uint64_t* bits, size_t count,
                                 const CommLink& link) const = 0;

  // What `job` (a ring of a call of `call_count` elements) can carry in its data messages: the one
  // place that says so. The ring carries neither (none of its messages reaches every rank).
  virtual Carries carries(const ShapeJob& job, size_t call_count, const CommLink& link) const;

  // For a rank that agreed on the decision first and found it different: receives and drops
  // what `peers` sent speculatively to this rank on this shape's two-shot schedule of `count`
  // elements (its cut and phase), so that no message is left behind.
  virtual Status drain_speculation(const CommLink& link, size_t count, size_t slice_elems,
                                   const std::vector<int>& peers) const;

  // One position per this many elements in the accuracy estimate's sample (accuracy.h): the
  // side ring's share of the wire stays under 1% of the call's packets.
  virtual size_t sample_stride() const = 0;
};

// The shape of a call of `kind` on a flat ring, with its data scheduled by `schedule`; null for
// kRail (the hierarchy's).
const CollShape* coll_shape(CallKind kind, Schedule schedule = Schedule::kRing);

}  // namespace sketchccl::coll
