// P ReductionEngine ranks over loopback sockets (loopback_ranks.h), each call run with one thread
// per rank: the harness of the engine end-to-end tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/codec.h"
#include "src/coll/reduction_engine.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "transport/transport.h"

namespace sketchccl::testutil {

// Each rank's buffer of `v` by address, for the pointer overloads of EngineRanks::run.
template <typename T>
std::vector<T*> data_of(std::vector<std::vector<T>>& v) {
  std::vector<T*> d;
  for (auto& x : v)
    d.push_back(x.data());
  return d;
}
template <typename T>
std::vector<const T*> data_of(const std::vector<std::vector<T>>& v) {
  std::vector<const T*> d;
  for (const auto& x : v)
    d.push_back(x.data());
  return d;
}

class EngineRanks {
 public:
  // P engines with settings `s`; `timeout_s` bounds the transports and every call.
  EngineRanks(int p, const coll::Settings& s, double timeout_s)
      : p_(p), timeout_s_(timeout_s), t_(loopback_transports(p, timeout_s)) {
    for (int r = 0; r < p; ++r)
      engines_.push_back(std::make_unique<coll::ReductionEngine>(s, p));
  }

  // One AllReduce of send[r] into recv[r] on every rank, as call `call` (the ring's op_seq), each
  // rank on its own thread; `scatter`: a ReduceScatter, recv[r] holding rank r's chunk of
  // count / P elements. Each rank's buffers are named by address, so a test may reuse one;
  // `keys`: each rank's ReductionArgs::state_key (none: keyed by send).
  void run(uint32_t call, const std::vector<const void*>& send, const std::vector<void*>& recv,
           size_t count, bool scatter = false, kernels::ElemType type = kernels::ElemType::kF32,
           bool avg = false, const std::vector<const void*>& keys = {}) {
    std::vector<std::thread> th;
    for (int r = 0; r < p_; ++r) {
      th.emplace_back([&, r] {
        coll::CommLink link = ring_link(t_[r].get(), r, p_, timeout_s_, call);
        coll::ReductionArgs a;
        a.send = send[r];
        a.recv = recv[r];
        a.count = count;
        a.kind = scatter ? coll::CallKind::kReduceScatter : coll::CallKind::kAllReduce;
        a.type = type;
        a.avg = avg;
        if (!keys.empty()) a.state_key = keys[r];
        Status st = engines_[r]->run(link, a);
        EXPECT_TRUE(st.ok()) << st.to_string();
      });
    }
    for (auto& t : th)
      t.join();
  }
  // The same in fp32 (sum).
  void run(uint32_t call, const std::vector<const float*>& send, const std::vector<float*>& recv,
           size_t count, bool scatter = false) {
    run(call, std::vector<const void*>(send.begin(), send.end()),
        std::vector<void*>(recv.begin(), recv.end()), count, scatter);
  }
  // x[r] into y[r], x[0].size() elements.
  void run(uint32_t call, const std::vector<std::vector<float>>& x,
           std::vector<std::vector<float>>* y, bool scatter = false) {
    run(call, data_of(x), data_of(*y), x[0].size(), scatter);
  }

  coll::ReductionEngine& engine(int r) { return *engines_[r]; }
  const coll::CodecStats& stats(int r, kernels::CodecId c) {
    return engines_[r]->stats().by_codec[kernels::codec_name(c)];
  }

 private:
  int p_;
  double timeout_s_;
  std::vector<std::unique_ptr<transport::Transport>> t_;
  std::vector<std::unique_ptr<coll::ReductionEngine>> engines_;
};

}  // namespace sketchccl::testutil
