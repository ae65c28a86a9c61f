// The reduce-scatter half of the ring alone (ring_reduce_scatter): ranks are threads over
// loopback sockets; rank r must decode exactly its chunk r (NCCL's layout), with the exact sum,
// and nothing else.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "src/coll/ring.h"
#include "tests/unit/coll/loopback_ranks.h"
#include "transport/transport.h"

namespace sketchccl::coll {
namespace {

// Exact fp32 sums; records which elements were decoded.
class SumOps : public SliceOps {
 public:
  SumOps(const float* x, float* y, std::vector<int>* decoded) : x_(x), y_(y), decoded_(decoded) {}
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
  Status decode_start(size_t off, size_t n, const void* pkt, size_t) override {
    std::memcpy(y_ + off, pkt, n * sizeof(float));
    for (size_t i = 0; i < n; ++i)
      (*decoded_)[off + i]++;
    return Status::Ok();
  }

 private:
  const float* x_;
  float* y_;
  std::vector<int>* decoded_;
};

// Runs the ring; `bounds` empty: the even cut. Checks every rank's decoded elements.
void check_scatter(int p, size_t count, std::vector<size_t> bounds, size_t slice, int depth) {
  SCOPED_TRACE(::testing::Message() << p << " ranks, " << count << " elements, depth " << depth);
  auto t = testutil::loopback_transports(p, 10);
  std::vector<std::vector<float>> x(p, std::vector<float>(count)), y(p);
  std::vector<std::vector<int>> decoded(p, std::vector<int>(count, 0));
  for (int r = 0; r < p; ++r) {
    y[r].assign(count, -1.0f);
    for (size_t i = 0; i < count; ++i)
      x[r][i] = float((i * 7 + static_cast<size_t>(r) * 13) % 101);
  }
  std::vector<Status> status(p);
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r) {
    th.emplace_back([&, r] {
      SumOps ops(x[r].data(), y[r].data(), &decoded[r]);
      CommLink link;
      link.transport = t[r].get();
      link.rank = r;
      link.nranks = p;
      link.timeout_s = 10;
      link.phase = 3;
      status[r] = ring_reduce_scatter(link, count, slice, depth, ops, nullptr,
                                      bounds.empty() ? nullptr : &bounds);
    });
  }
  for (auto& th1 : th)
    th1.join();
  if (bounds.empty()) {
    for (int c = 0; c <= p; ++c)
      bounds.push_back(static_cast<size_t>(c) * (count / static_cast<size_t>(p)));
  }
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r].to_string();
    for (size_t i = 0; i < count; ++i) {
      const bool mine = i >= bounds[r] && i < bounds[r + 1];
      ASSERT_EQ(decoded[r][i], mine ? 1 : 0) << "rank " << r << " element " << i;
      if (!mine) continue;
      float want = 0;
      for (int q = 0; q < p; ++q)
        want += x[q][i];
      ASSERT_EQ(y[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

TEST(RingScatter, EachRankDecodesExactlyItsOwnChunk) {
  for (int p : {1, 2, 3, 5}) {
    for (size_t per_rank : {size_t(0), size_t(1), size_t(7), size_t(1001)}) {
      for (int depth : {1, 4})
        check_scatter(p, per_rank * static_cast<size_t>(p), {}, 64, depth);
    }
  }
}

TEST(RingScatter, UnevenChunkBounds) {
  check_scatter(3, 1000, {0, 0, 999, 1000}, 64, 2);
  check_scatter(4, 517, {0, 200, 201, 201, 517}, 32, 3);
}

TEST(RingScatter, BoundsThatDoNotCutTheCountAreRefused) {
  SumOps ops(nullptr, nullptr, nullptr);
  CommLink link;
  std::vector<size_t> bad = {0, 5};
  EXPECT_EQ(ring_reduce_scatter(link, 6, 64, 1, ops, nullptr, &bad).code(), Code::kInternalError);
}

}  // namespace
}  // namespace sketchccl::coll
