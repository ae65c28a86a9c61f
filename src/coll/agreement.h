// What the ranks of a call agree on, and the small exchange that carries it (docs/engine.md):
// every decision that shapes a call comes from numbers every rank holds alike, and where a rank's
// own history matters the ranks compare their decisions first (an all-gather of
// `DecisionMessage`s on the decision phase) or, on two-shot, in the same round as the data
// (`Speculation`, its messages handled by `DecisionHeader` and `Drops`). Every schedule of a
// reduction (the ring, two-shot, the hierarchy) shares these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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

// The decision as the header of a speculative shape's data (two-shot's): this rank's goes to every
// peer ahead of its data messages, and each peer's is compared as it arrives. A shape receives a
// peer's data only once take() says its decision equals this rank's, sends or receives what needs
// every rank's (two-shot's reduced packets) only once all_equal(), and drops (Drops) what a peer
// that decided otherwise sent speculatively; once every transfer of the call is in, settle()
// tells the Speculation whether the ranks disagreed.
class DecisionHeader {
 public:
  // What to do with a peer's data messages, once its decision is in.
  enum class Peer {
    kTake,  // the same decision: its data is this call's
    kDrop,  // another decision, sent ahead of speculative data: receive that data and drop it
    kNone,  // another decision, and the peer sends no data (it agreed first)
  };
  explicit DecisionHeader(Speculation& spec) : spec_(spec) {}
  // Posts the receive of every peer's decision and sends this rank's (tags of the decision's
  // phase, the rest of `note` the shape's).
  Status start(Exchange& ex, TransferNote note);
  // Peer q's decision has arrived.
  Peer take(int q);
  // Every peer's decision is in and equal to this rank's.
  bool all_equal() const { return left_ == 0 && !disagreed_; }
  bool disagreed() const { return disagreed_; }
  // The call's transfers are all in: a disagreement goes to the Speculation (nothing of the call
  // was kept; it runs again).
  void settle() { spec_.disagreed = disagreed_; }

 private:
  Speculation& spec_;
  std::vector<DecisionMessage> theirs_;  // every rank's, by rank
  int left_ = 0;                         // peers' decisions still due
  bool disagreed_ = false;
};

// Receives of messages to drop (another decision's speculative data, of unknown size up to a
// bound): scratch the Exchange writes into and nothing reads. Declare it before the Exchange, so
// that a failed call's pending receives are closed before their memory goes.
class Drops {
 public:
  Status post(Exchange& ex, int peer, uint64_t tag, size_t bound, TransferNote note = {});

 private:
  std::vector<std::unique_ptr<uint8_t[]>> bufs_;
};

// The ranks' decisions after a round of their own (decision_round): equal everywhere, and the
// peers that had sent this rank data speculatively (whose data this rank drops if not).
struct Agreement {
  bool agreed = true;
  std::vector<int> speculated;
};
// Every rank's decision to every other in one round (tags of link.phase), compared.
Status decision_round(const CommLink& link, const DecisionMessage& mine, Agreement* out);

// All-gather of `bytes` per rank in one message round over an Exchange: every rank sends its
// block straight to every other (tags of link.op_seq and link.phase); `all` gets rank r's block
// at r * bytes. For the per-call agreement exchanges, whose latency a ring of P - 1 steps would
// multiply by P - 1. `what` (static storage) names the exchange in its errors.
Status allgather_direct(const CommLink& link, const void* mine, size_t bytes, void* all,
                        const char* what = "a small exchange");

}  // namespace sketchccl::coll
