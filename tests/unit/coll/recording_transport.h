// What the engine tests over loopback ranks look at in the messages: a transport that records
// the peer and tag of every send and receive, the messages no receive took, the phase of a tag;
// a thread per rank, and P engines whose calls run on them through recording transports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "src/coll/reduction_engine.h"
#include "src/coll/ring.h"
#include "tests/unit/coll/loopback_ranks.h"
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

// Forwards every call to `inner`, so a test's transport overrides only the calls it watches.
class ForwardingTransport : public transport::Transport {
 public:
  explicit ForwardingTransport(transport::Transport* inner) : inner_(inner) {}
  const char* name() const override { return inner_->name(); }
  transport::TransportProperties properties() const override { return inner_->properties(); }
  transport::Blob address() const override { return inner_->address(); }
  Status connect(int peer, const transport::Blob& a) override { return inner_->connect(peer, a); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::RequestId* id) override {
    return inner_->isend(peer, tag, buf, bytes, id);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, transport::RequestId* id) override {
    return inner_->irecv(peer, tag, buf, bytes, id);
  }
  Status progress() override { return inner_->progress(); }
  bool can_block() const override { return inner_->can_block(); }
  Status wait_for_events(double max_s) override { return inner_->wait_for_events(max_s); }
  Status test(transport::RequestId id, bool* done, size_t* bytes) override {
    return inner_->test(id, done, bytes);
  }
  void close() override { inner_->close(); }

 protected:
  transport::Transport* inner() const { return inner_; }

 private:
  transport::Transport* inner_;
};

// Forwards to a transport and records the tag of every send, in posting order, and the peer and
// tag of every send and receive.
class RecordingTransport final : public ForwardingTransport {
 public:
  explicit RecordingTransport(transport::Transport* inner) : ForwardingTransport(inner) {}
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::RequestId* id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sent_.push_back(tag);
      sends_.emplace_back(peer, tag);
    }
    return ForwardingTransport::isend(peer, tag, buf, bytes, id);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t bytes, transport::RequestId* id) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      recvs_.emplace_back(peer, tag);
    }
    return ForwardingTransport::irecv(peer, tag, buf, bytes, id);
  }
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

// A call's arguments as one expression, for the per-rank lambdas of RecordedRanks::run.
inline coll::ReductionArgs call_args(const void* send, void* recv, size_t count,
                                     coll::CallKind kind = coll::CallKind::kAllReduce) {
  coll::ReductionArgs a;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.kind = kind;
  return a;
}

// P engines over loopback sockets, each through a RecordingTransport: the ranks of one test.
struct RecordedRanks {
  RecordedRanks(int nranks, const coll::Settings& s, double timeout)
      : p(nranks), timeout_s(timeout), t(loopback_transports(nranks, timeout)) {
    for (int r = 0; r < p; ++r) {
      rec.push_back(std::make_unique<RecordingTransport>(t[r].get()));
      link_transport.push_back(rec.back().get());
      engines.push_back(std::make_unique<coll::ReductionEngine>(s, p));
    }
  }

  // Rank r's call numbered `op` on the calling thread, for the tests that stagger the ranks.
  Status call(int r, uint32_t op, const coll::ReductionArgs& a) {
    coll::CommLink link = ring_link(link_transport[r], r, p, timeout_s, op);
    return engines[r]->run(link, a);
  }
  // The call numbered `op` of args(r) on every rank, a thread each; each rank's status.
  template <typename ArgsOf>
  std::vector<Status> run(uint32_t op, ArgsOf args) {
    return run_on(p, op, args);
  }
  // The same on ranks [0, n) only, for the tests whose last ranks are gone.
  template <typename ArgsOf>
  std::vector<Status> run_on(int n, uint32_t op, ArgsOf args) {
    return on_ranks(n, [&](int r) { return call(r, op, args(r)); });
  }

  int p;
  double timeout_s;
  std::vector<std::unique_ptr<transport::Transport>> t;  // the sockets, for a test to close one
  std::vector<std::unique_ptr<RecordingTransport>> rec;
  std::vector<transport::Transport*> link_transport;  // rec's, unless a test puts a tamperer
  std::vector<std::unique_ptr<coll::ReductionEngine>> engines;
};

// The phase of a ring tag (ring_tag's layout: the step and slice below it).
inline bool tag_has_phase(uint64_t tag, uint32_t op, uint8_t phase) {
  const uint64_t low = coll::ring_tag(0, 0, -1, -1);
  return (tag & ~low) == coll::ring_tag(op, phase, 0, 0);
}

}  // namespace sketchccl::testutil
