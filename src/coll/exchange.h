// The one transfer layer under every schedule (docs/engine.md), as NCCL's Primitives is under its
// ring, tree and NVLS: post a send or a receive of a tagged message to a peer, take what
// completed, and wait by one rule. Shapes (the ring, two-shot, the hierarchy's node phases, p2p,
// the compressed AllGather, the small agreement exchanges) say what goes where; the Exchange owns
// the requests, the size checks, the waiting, the abort and timeout errors and the close on
// failure.
//
// The one wait: a pass that moved nothing calls idle(). It fails on the abort flag ("operation
// aborted (ncclCommAbort)") and after SKETCHCCL_TIMEOUT without progress (any completion, or the
// shape's own local work, resets the clock); otherwise it sleeps in the transport where the
// transport can block and no local work (codec tickets, decodes) is running, else it spins, then
// yields, then sleeps 50 us, so that many ranks on few cores all run.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/core/config.h"
#include "src/core/status.h"
#include "transport/transport.h"

namespace sketchccl::coll {

// The communicator's link as every schedule sees it: the transport, this rank's place, and the
// rules of waiting.
struct CommLink {
  transport::Transport* transport = nullptr;
  int rank = 0;
  int nranks = 1;
  double timeout_s = Config::defaults().get_double(Var::kTimeout);  // SKETCHCCL_TIMEOUT
  const std::atomic<bool>* abort = nullptr;  // set by ncclCommAbort from another thread
  uint32_t op_seq = 0;                       // distinguishes the tags of successive operations
  uint8_t phase = 0;                         // distinguishes exchanges inside one operation
  // Every rank's transport address (this link's rank order), for the schedules that talk to any
  // rank, which connect on first use; null: the transport already reaches every rank.
  const std::vector<transport::Blob>* addresses = nullptr;
};

// Connects to `peer` (first use) where the link names the addresses; a no-op for this rank.
Status connect_peer(const CommLink& link, int peer);
// Connects to every other rank of the link.
Status connect_all(const CommLink& link);
// The link names this rank among nranks, and a transport where there are peers; `what` names the
// schedule in the error.
Status check_link(const CommLink& link, const char* what);

// What a shape says of one of its transfers: where it is in the schedule (for its own
// bookkeeping and for errors). -1: not applicable.
struct TransferNote {
  int slice = -1;
  int step = -1;
  int phase = -1;   // the tag phase, where it is not the link's
  int cookie = -1;  // the shape's own (a lane, a chunk, a kind)
};

// A transfer that completed: its kind, peer, bytes moved and note.
struct Completion {
  bool recv = false;
  int peer = 0;
  size_t bytes = 0;
  TransferNote note;
};

class Exchange {
 public:
  // `what` names the shape in errors ("the ring", "the two-shot schedule", ...): static storage.
  Exchange(const CommLink& link, const char* what);
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // Transfers still pending (a failed or abandoned call): closes the transport, so nothing
  // writes into the shape's buffers after they go.
  ~Exchange();

  const CommLink& link() const { return link_; }

  // Posts a message; the buffer stays untouched until the transfer completes.
  Status send(int peer, uint64_t tag, const void* buf, size_t bytes, TransferNote note = {});
  // Posts a receive of exactly `bytes` (another size fails the call: the ranks disagree on the
  // call), or, with exact = false, of at most `bytes` (messages of unknown size to drop).
  Status recv(int peer, uint64_t tag, void* buf, size_t bytes, TransferNote note = {},
              bool exact = true);
  size_t pending() const { return pending_.size(); }
  // Moves the transport without testing any transfer: a send just posted leaves now, while the
  // shape goes on encoding (a test of every pending transfer per send would cost their square).
  Status progress();

  // One pass without waiting: the abort flag, the transport's progress, every pending transfer
  // tested; those complete are appended to *done (null: dropped). A completion resets the
  // timeout's clock.
  Status poll(std::vector<Completion>* done);
  // The pass moved nothing: waits a little by the one rule (above). `local_work`: the shape has
  // work of its own running (codec tickets) that a sleep in the transport would not notice.
  Status idle(bool local_work = false);
  // The shape moved on by itself (local work done): the timeout's clock starts again.
  void progressed();
  // Polls until no transfer is pending; completions are appended to *done (null: dropped).
  Status wait_all(std::vector<Completion>* done = nullptr);
  // Waits, by the same rule, for local work: `test` sets *done once it is finished. `what` names
  // the work in the timeout's error ("its own decodes").
  Status wait_local(const std::function<Status(bool*)>& test, const char* what);

  // Closes the transport: the call failed, the ranks are out of step, and nothing may write into
  // posted buffers any more. Pending transfers are forgotten.
  void fail();

  // `st` with where it happened: "(rank r of P, <shape>, <detail>, slice j, step i)".
  Status annotate(const Status& st, const char* detail, const TransferNote& note = {}) const;

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  struct Pending {
    transport::RequestId id = 0;
    int peer = 0;
    bool recv = false;
    bool exact = true;
    size_t bytes = 0;
    TransferNote note;
  };
  Status check(const Status& st, const Pending& pd, size_t got) const;
  Status timeout_error() const;
  Status aborted() const;

  const CommLink& link_;
  const char* what_;
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point last_progress_;
  int idle_ = 0;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0;
};

}  // namespace sketchccl::coll
