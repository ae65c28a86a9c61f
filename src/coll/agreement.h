// What the ranks of a call agree on, and the small exchange that carries it (docs/engine.md):
// every decision that shapes a call comes from numbers every rank holds alike, and where a rank's
// own history matters the ranks compare their decisions first (an all-gather of
// `DecisionMessage`s on the decision phase) or, on two-shot, in the same round as the data
// (`Speculation`). Every schedule of a reduction (the ring, two-shot, the hierarchy) shares these.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/coll/exchange.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// The decision inputs of a call (reduction_engine.cc), as they travel: under `auto`, the guard or
// error feedback each rank decides from its own history and sends this to every other rank (tags
// of the decision phase). A rank that runs two-shot (AllReduce or ReduceScatter) sends it right
// ahead of its contributions instead of waiting for the others' (`speculative`), so the agreement
// costs no message round of its own.
struct DecisionMessage {
  uint32_t speculative = 0;  // 1: this rank's two-shot contributions follow
  uint32_t reserved = 0;
  uint8_t inputs[40] = {};  // what every rank must hold equal
};
bool same_decision(const DecisionMessage& a, const DecisionMessage& b);

// One speculative call: the decision to send ahead of the data and, set by the schedule, whether
// the ranks' decisions differed. Then this rank has received and dropped what the others sent,
// written nothing to its output and sent no reduced packet: the call is to be run again (exact).
struct Speculation {
  uint8_t phase = 0;  // the decision's tag phase
  DecisionMessage mine;
  bool disagreed = false;
};

// All-gather of `bytes` per rank in one message round over an Exchange: every rank sends its
// block straight to every other (tags of link.op_seq and link.phase); `all` gets rank r's block
// at r * bytes. For the per-call agreement exchanges, whose latency a ring of P - 1 steps would
// multiply by P - 1. `what` (static storage) names the exchange in its errors.
Status allgather_direct(const CommLink& link, const void* mine, size_t bytes, void* all,
                        const char* what = "a small exchange");

}  // namespace sketchccl::coll
