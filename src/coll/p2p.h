// Point-to-point transfers of the exact collectives and of ncclSend/ncclRecv: any two ranks,
// connected on first use (exchange.h's connect_peer; the ring connects only neighbours),
// messages cut into pieces, posted together and waited for together through the Exchange.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/exchange.h"
#include "src/coll/ring_phase.h"
#include "src/core/status.h"

namespace sketchccl::coll {

// What one exact operation may use on the proxy thread: the communicator's link (addresses:
// every rank's, from the bootstrap; op_seq: this collective's number) and the p2p counters. A
// CommLink itself, so that connect_peer and the Exchange take it as it is.
struct PeerLink : CommLink {
  // ncclSend/ncclRecv: messages so far to / from each peer (in order on both sides, as NCCL
  // matches them).
  std::vector<uint32_t>* sent = nullptr;
  std::vector<uint32_t>* received = nullptr;
};

// Transfers posted together; wait() drives them all to completion (Exchange::wait_all: the
// timeout bounds a wait without progress). A receive must get exactly the bytes it expects
// (ranks that disagree on a count fail, they do not hang). After a failure the transport is
// closed, so nothing writes into the caller's buffers any more.
class Transfers {
 public:
  // `what` names the transfers in errors (static storage).
  explicit Transfers(const CommLink& link, const char* what = "the point-to-point transfers")
      : ex_(link, what) {}

  // `tag_base`: from op_tag (below); the piece number is added.
  Status send(int peer, uint64_t tag_base, const void* buf, size_t bytes);
  Status recv(int peer, uint64_t tag_base, void* buf, size_t bytes);
  Status wait();

 private:
  // Closes the transport on a failure (the ranks are out of step); returns `st`.
  Status closed_on_failure(const Status& st);
  Exchange ex_;
};

// The tag of one message of an operation: phase, the operation's (or pair's) number, a step.
uint64_t op_tag(uint8_t phase, uint32_t seq, int step);

// Message pieces: a transfer of more bytes travels as several messages of at most this size.
constexpr size_t kPieceBytes = size_t(4) << 20;

}  // namespace sketchccl::coll
