// What the engine tests over loopback ranks look at in the messages: a transport that records
// the peer and tag of every send and receive, the messages no receive took, the phase of a tag;
// and a thread per rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "src/coll/ring.h"
#include "transport/transport.h"

namespace sketchccl::testutil {

// Runs `fn(r)` on a thread per rank; returns each rank's status.
template <typename Fn>
std::vector<Status> on_ranks(int p, Fn fn) {
  std::vector<Status> st(p);
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] { st[r] = fn(r); });
  for (auto& t : th)
    t.join();
  return st;
}

// Forwards to a transport and records the tag of every send, in posting order, and the peer and
// tag of every send and receive.
class RecordingTransport final : public transport::Transport {
 public:
  explicit RecordingTransport(transport::Transport* inner) : inner_(inner) {}
  const char* name() const override { return inner_->name(); }
  transport::TransportProperties properties() const override { return inner_->properties(); }
  transport::Blob address() const override { return inner_->address(); }
  Status connect(int peer, const transport::Blob& a) override { return inner_->connect(peer, a); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::RequestId* id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sent_.push_back(tag);
      sends_.emplace_back(peer, tag);
    }
    return inner_->isend(peer, tag, buf, bytes, id);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, transport::RequestId* id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      recvs_.emplace_back(peer, tag);
    }
    return inner_->irecv(peer, tag, buf, bytes, id);
  }
  Status progress() override { return inner_->progress(); }
  bool can_block() const override { return inner_->can_block(); }
  Status wait_for_events(double max_s) override { return inner_->wait_for_events(max_s); }
  Status test(transport::RequestId id, bool* done, size_t* bytes) override {
    return inner_->test(id, done, bytes);
  }
  void close() override { inner_->close(); }
  std::vector<uint64_t> sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  using Ends = std::vector<std::pair<int, uint64_t>>;  // (peer, tag)
  Ends sends() {
    std::lock_guard<std::mutex> lock(mu_);
    return sends_;
  }
  Ends recvs() {
    std::lock_guard<std::mutex> lock(mu_);
    return recvs_;
  }

 private:
  transport::Transport* inner_;
  std::mutex mu_;
  std::vector<uint64_t> sent_;
  Ends sends_, recvs_;
};

// Messages that no receive took: a send from rank a to b whose tag b never posted a receive for
// from a (left in b's transport, for a later call to trip over).
inline int unreceived(std::vector<std::unique_ptr<RecordingTransport>>& rec) {
  int n = 0;
  for (size_t a = 0; a < rec.size(); ++a) {
    const RecordingTransport::Ends sends = rec[a]->sends();
    for (const auto& [b, tag] : sends) {
      const RecordingTransport::Ends got = rec[static_cast<size_t>(b)]->recvs();
      const auto from_a = std::make_pair(static_cast<int>(a), tag);
      const auto sent = std::count(sends.begin(), sends.end(), std::make_pair(b, tag));
      n += std::count(got.begin(), got.end(), from_a) < sent ? 1 : 0;
    }
  }
  return n;
}

// The phase of a ring tag (ring_tag's layout: the step and slice below it).
inline bool tag_has_phase(uint64_t tag, uint32_t op, uint8_t phase) {
  const uint64_t low = coll::ring_tag(0, 0, -1, -1);
  return (tag & ~low) == coll::ring_tag(op, phase, 0, 0);
}

}  // namespace sketchccl::testutil
