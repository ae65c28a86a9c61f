// The ring with codec work that completes later (SliceOps::encode_start / step_start / test, the
// contract of an asynchronous backend): ranks are threads over loopback sockets, a reduction reads its
// incoming packet and writes its output only when test() reports the work done, so a ring that
// sent, reused or decoded a packet too early would get a wrong sum. Packet memory comes from
// alloc_packets and must all come back.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "src/coll/ring.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "tests/unit/warn_guard.h"
#include "transport/transport.h"

namespace sketchccl::coll {
namespace {

using testutil::AllowWarnings;

// Exact fp32 sums; every encode and step finishes `delay` test() calls after it starts.
class DeferredSumOps : public SliceOps {
 public:
  DeferredSumOps(const float* x, float* y, int delay, uint64_t fail_ticket)
      : x_(x), y_(y), delay_(delay), fail_ticket_(fail_ticket) {}

  size_t packet_bytes(size_t, size_t n) const override { return n * sizeof(float); }
  Status encode(size_t off, size_t n, int, void* pkt, size_t) override {
    std::memcpy(pkt, x_ + off, n * sizeof(float));
    return Status::Ok();
  }
  Status step(size_t off, size_t n, int, const void* in, size_t, void* out, size_t) override {
    const float* a = static_cast<const float*>(in);
    float* o = static_cast<float*>(out);
    for (size_t i = 0; i < n; ++i)
      o[i] = a[i] + x_[off + i];
    return Status::Ok();
  }
  // Decodes finish late too, read their packet only then, and are collected by flush().
  Status decode_start(size_t off, size_t n, const void* pkt, size_t) override {
    decodes_.push_back({off, n, pkt, delay_});
    return Status::Ok();
  }
  Status flush(bool* done) override {
    for (auto it = decodes_.begin(); it != decodes_.end();) {
      if (stuck_decodes_ || --it->polls_left > 0) {
        ++it;
        continue;
      }
      std::memcpy(y_ + it->off, it->pkt, it->n * sizeof(float));
      it = decodes_.erase(it);
    }
    *done = decodes_.empty();
    return Status::Ok();
  }
  void set_stuck_decodes() { stuck_decodes_ = true; }

  Status encode_start(size_t off, size_t n, int, void* pkt, size_t, uint64_t* ticket) override {
    Pending& w = open(pkt, n, ticket);
    w.off = off;
    return Status::Ok();
  }
  // The device reads `in` late too: the ring must leave it alone until the ticket completes.
  Status step_start(size_t off, size_t n, int, const void* in, size_t, void* out, size_t,
                    uint64_t* ticket) override {
    Pending& w = open(out, n, ticket);
    w.off = off;
    w.in = in;
    return Status::Ok();
  }
  Status test(uint64_t ticket, bool* done) override {
    *done = false;
    auto it = pending_.find(ticket);
    if (it == pending_.end()) return Status(Code::kInternalError, "unknown ticket");
    if (--it->second.polls_left > 0) return Status::Ok();
    *done = true;
    Pending w = it->second;
    pending_.erase(it);
    if (ticket == fail_ticket_) return Status(Code::kInternalError, "injected codec failure");
    const size_t bytes = w.n * sizeof(float);
    Status st = w.in != nullptr ? step(w.off, w.n, 0, w.in, bytes, w.dst, bytes)
                                : encode(w.off, w.n, 0, w.dst, bytes);
    ++completed_;
    return st;
  }
  void* alloc_packets(size_t bytes) override {
    ++live_;
    void* p = SliceOps::alloc_packets(bytes);
    owned_.insert(p);
    return p;
  }
  void free_packets(void* p) override {
    --live_;
    owned_.erase(p);
    SliceOps::free_packets(p);
  }

  int completed() const { return completed_; }
  size_t in_flight() const { return pending_.size(); }
  int live_packet_buffers() const { return live_; }
  // Where to leave the live count when this object goes (after the ring's buffers are gone).
  void set_live_probe(int* probe) { probe_ = probe; }
  ~DeferredSumOps() override {
    if (probe_ != nullptr) *probe_ = live_;
    for (void* p : owned_)  // what the ring parked after work that never finished
      SliceOps::free_packets(p);
  }

 private:
  struct Pending {
    void* dst = nullptr;
    const void* in = nullptr;  // step: read at completion
    size_t off = 0, n = 0;
    int polls_left = 0;
  };
  Pending& open(void* dst, size_t n, uint64_t* ticket) {
    *ticket = next_++;
    Pending& w = pending_[*ticket];
    w.dst = dst;
    w.n = n;
    w.polls_left = delay_;
    return w;
  }

  const float* x_;
  float* y_;
  int delay_;
  uint64_t fail_ticket_;
  uint64_t next_ = 1;
  std::map<uint64_t, Pending> pending_;
  int completed_ = 0;
  int live_ = 0;
  int* probe_ = nullptr;
  struct LateDecode {
    size_t off, n;
    const void* pkt;
    int polls_left;
  };
  std::vector<LateDecode> decodes_;
  std::set<void*> owned_;
  bool stuck_decodes_ = false;
};

struct Ranks {
  std::vector<std::unique_ptr<transport::Transport>> t;
  explicit Ranks(int p) : t(testutil::loopback_transports(p, 10)) {}
};

struct Outcome {
  std::vector<Status> status;
  std::vector<std::vector<float>> y;
  std::vector<int> completed;
  std::vector<size_t> left;
  std::vector<int> live;  // packet buffers not given back after the ring
};

Outcome run_ring(int p, size_t count, size_t slice, int depth, int delay, int fail_rank,
                 bool stuck_decodes = false, double timeout_s = 10) {
  Ranks ranks(p);
  Outcome o;
  o.status.resize(p);
  o.y.assign(p, std::vector<float>(count, 0.0f));
  o.completed.resize(p);
  o.left.resize(p);
  o.live.resize(p);
  std::vector<std::vector<float>> x(p, std::vector<float>(count));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < count; ++i)
      x[r][i] = float((i * 7 + r * 13) % 101);  // small integers: every sum is exact
  }
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r) {
    th.emplace_back([&, r] {
      DeferredSumOps ops(x[r].data(), o.y[r].data(), delay, r == fail_rank ? 5 : 0);
      ops.set_live_probe(&o.live[r]);
      if (stuck_decodes) ops.set_stuck_decodes();
      CommLink link;
      link.transport = ranks.t[r].get();
      link.rank = r;
      link.nranks = p;
      link.timeout_s = timeout_s;
      o.status[r] = ring_allreduce(link, count, slice, depth, ops, nullptr);
      o.completed[r] = ops.completed();
      o.left[r] = ops.in_flight();
    });
  }
  for (auto& t : th)
    t.join();
  for (int r = 0; r < p && fail_rank < 0 && !stuck_decodes; ++r) {
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < p; ++q)
        want += x[q][i];
      if (o.y[r][i] != want) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << o.y[r][i] << " != " << want;
        break;
      }
    }
  }
  return o;
}

TEST(RingAsync, LateCodecWorkGivesTheExactSum) {
  for (int p : {2, 3, 4}) {
    for (int depth : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << p << " ranks, depth " << depth);
      Outcome o = run_ring(p, 10007, 256, depth, 7, -1);
      for (int r = 0; r < p; ++r) {
        EXPECT_TRUE(o.status[r].ok()) << o.status[r].to_string();
        // Every encode and step of this rank went through the asynchronous path.
        const int slices = int((10007 / p + 256) / 256);
        EXPECT_GE(o.completed[r], (p - 1) * (slices - 1)) << "rank " << r;
        EXPECT_EQ(o.left[r], 0u);
        EXPECT_EQ(o.live[r], 0) << "packet buffers not given back";
      }
    }
  }
}

TEST(RingAsync, FailedCodecWorkFailsTheRingAndIsDrained) {
  Outcome o = run_ring(3, 10007, 256, 4, 3, 1);
  EXPECT_FALSE(o.status[1].ok());
  EXPECT_NE(o.status[1].message().find("injected codec failure"), std::string::npos)
      << o.status[1].to_string();
  EXPECT_NE(o.status[1].message().find("codec work on this rank"), std::string::npos);
  EXPECT_EQ(o.left[1], 0u) << "work in flight was left behind";
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(o.live[r], 0) << "rank " << r << ": packet buffers not given back";
  for (int r : {0, 2})
    EXPECT_FALSE(o.status[r].ok()) << "rank " << r << " did not notice its neighbour's failure";
}

// Decodes that never finish: the ring gives up after SKETCHCCL_TIMEOUT with an error naming
// them, instead of waiting forever, and leaves their packet memory allocated (parked).
TEST(RingAsync, DecodesThatNeverFinishTimeOut) {
  AllowWarnings parked("codec work still running after a failure");
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = run_ring(2, 4096, 256, 2, 1, -1, true, 0.5);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(o.status[r].ok());
    EXPECT_NE(o.status[r].message().find("waiting for its own decodes"), std::string::npos)
        << o.status[r].to_string();
  }
  EXPECT_LT(s, 5.0);
}

}  // namespace
}  // namespace sketchccl::coll
