// s2 never silently lossy (docs/codecs.md, s2): what the engine keeps around an s2 ring.
// - The per-slice budget: each slice's union support from the previous call (every rank decoded
//   the same packets, so the numbers are agreed) sizes that slice's sketch.
// - The exact repair: decode reports the positions that did not peel; after the ring their
//   values are reduced exactly by a small `none` ring of their own (kPhaseS2Repair) and written
//   over the estimates. Where every rank decoded every slice (an AllReduce) the ranks know the
//   same positions with no exchange; a ReduceScatter's ranks each know their chunk's, and first
//   all-gather them (kPhaseS2RepairCnt, kPhaseS2RepairPos).
// - SKETCHCCL_S2_REPAIR=0 with error feedback: the positions that did not peel come out as 0 and
//   each rank keeps its own compensated input there as its residual (the exact loss, split).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/codec.h"
#include "src/backend/backend.h"
#include "src/coll/buffer_states.h"
#include "src/coll/ring.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// An order-dependent hash of the per-slice supports, for the ranks' agreement on the decision.
uint64_t s2_slice_support_hash(const S2SliceSupport& s);

// Counters per row for the slice [offset, offset + n): from that slice's support in `prev` when
// it holds the slice, else from `total_support` spread evenly over `count` elements.
uint32_t s2_slice_counters(const S2SliceSupport& prev, uint64_t total_support, size_t count,
                           size_t offset, size_t n, uint32_t rows, double per_nonzero);

// What the decodes of one s2 ring reported, slice by slice.
class S2DecodeLog {
 public:
  // `count` elements of the whole buffer; `unresolved`: collect the unresolved positions.
  Status reset(size_t count, bool unresolved);
  bool wants_unresolved() const { return want_; }
  // A decode of [offset, offset + n) finished: its statistics, and (when wanted) `bits`, the
  // slice's unresolved positions (bit 0 = offset).
  void record(size_t offset, size_t n, const kernels::DecodeStats& ds, const uint64_t* bits);

  const S2SliceSupport& supports() const { return supports_; }
  const std::vector<uint64_t>& unresolved() const { return bits_; }  // count bits
  uint64_t unresolved_count() const { return unresolved_; }

 private:
  bool want_ = false;
  size_t count_ = 0;
  S2SliceSupport supports_;
  std::vector<uint64_t> bits_;
  uint64_t unresolved_ = 0;
};

// This rank's input where it is non-zero, read before an in-place call overwrites it.
struct S2SavedInput {
  std::vector<uint64_t> bits;  // count bits: the input's non-zeros (NaN included)
  std::vector<float> values;   // in position order
};
Status s2_save_input(backend::Backend& be, const void* x, kernels::ElemType t, size_t count,
                     S2SavedInput* out);

// An exact fp32 AllReduce of m values on the given ring phase (the engine's `none` ring):
// sums = sum over ranks of vals; adds the bytes it sent to *bytes_sent.
using S2ExactRing = std::function<Status(uint8_t phase, const float* vals, float* sums, size_t m,
                                         uint64_t* bytes_sent)>;

struct S2RepairCall {
  backend::Backend* be = nullptr;  // the user buffers' backend
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;       // input elements
  size_t recv_first = 0;  // the input element recv holds first (a ReduceScatter's chunk)
  size_t recv_count = 0;  // elements of recv
  kernels::ElemType type = kernels::ElemType::kF32;
  float scale = 1.0f;
  const S2SavedInput* saved = nullptr;  // null: read `send`, untouched by the call
  // Every rank decoded the whole result, so all know the same positions (else each knows its
  // own output's: a ReduceScatter).
  bool whole = true;
};

struct S2RepairResult {
  uint64_t repaired = 0;    // positions reduced exactly, all ranks' (the same on every rank)
  uint64_t bytes_sent = 0;  // this rank's bytes of the exchanges
};

// The repair, after the ring and its decodes (log.unresolved() filled). Nothing to do, and no
// message, for a whole result without unresolved positions; a ReduceScatter exchanges its count.
Status s2_repair(const CommLink& link, const S2RepairCall& call, const S2DecodeLog& log,
                 const S2ExactRing& exact_ring, S2RepairResult* out);

// SKETCHCCL_S2_REPAIR=0 with error feedback (AllReduce): recv is 0 at the unresolved positions,
// and `residual` (count floats of `be`, holding this call's compensated input everywhere) keeps
// its values there only. *residual_sq: the sum of squares kept.
Status s2_lossy_feedback(backend::Backend& be, const S2DecodeLog& log, void* recv,
                         kernels::ElemType type, size_t count, float* residual,
                         double* residual_sq);

}  // namespace sketchccl::coll
