// Point-to-point transfers of the exact collectives and of ncclSend/ncclRecv: any two ranks,
// connected on first use (the ring connects only neighbours), messages cut into pieces, posted
// together and waited for together within SKETCHCCL_TIMEOUT and the abort flag.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/coll/ring_phase.h"
#include "src/core/status.h"
#include "transport/transport.h"

namespace sketchccl::coll {

// What one exact operation may use on the proxy thread.
struct PeerLink {
  transport::Transport* transport = nullptr;
  int rank = 0;
  int nranks = 1;
  double timeout_s = 300;
  const std::atomic<bool>* abort = nullptr;
  const std::vector<transport::Blob>* addresses = nullptr;  // every rank's, from the bootstrap
  uint32_t op_seq = 0;                                      // this collective's number
  // ncclSend/ncclRecv: messages so far to / from each peer (in order on both sides, as NCCL
  // matches them).
  std::vector<uint32_t>* sent = nullptr;
  std::vector<uint32_t>* received = nullptr;
};

// Connects to `peer` once (both sides of a pair call it before their first transfer).
Status connect_peer(const PeerLink& link, int peer);

// Transfers posted together; wait() drives them all to completion. A receive must get exactly
// the bytes it expects (ranks that disagree on a count fail, they do not hang). After a failure
// the transport is closed, so nothing writes into the caller's buffers any more.
class Transfers {
 public:
  explicit Transfers(const PeerLink& link) : link_(link) {}
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;
  ~Transfers();

  // `tag_base`: from op_tag (below); the piece number is added.
  Status send(int peer, uint64_t tag_base, const void* buf, size_t bytes);
  Status recv(int peer, uint64_t tag_base, void* buf, size_t bytes);
  Status wait();

 private:
  struct Pending {
    transport::RequestId id;
    int peer;
    size_t expect;  // receives: bytes expected; sends: SIZE_MAX
  };
  Status fail(Status st);
  const PeerLink& link_;
  std::vector<Pending> pending_;
};

// The tag of one message of an operation: phase, the operation's (or pair's) number, a step.
uint64_t op_tag(uint8_t phase, uint32_t seq, int step);

// Message pieces: a transfer of more bytes travels as several messages of at most this size.
constexpr size_t kPieceBytes = size_t(4) << 20;

}  // namespace sketchccl::coll
