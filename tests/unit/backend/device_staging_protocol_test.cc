// The staged device call's protocol (docs/cuda.md, "The device path"; device_staging.h) with
// real in-process Communicators over a host model of the GPU (tests/support/model_device.h) that
// has the hazards of the hardware: streams on a few hardware queues (one included), each running
// its items strictly in order, so that a wait at the head of a queue blocks every stream behind
// it; launches that return only once their work ran; faults on every enqueue. Each rank is its
// own device of the model. Every test also checks that the proxy made no device runtime call
// (the model's violations and CommStats::proxy_cuda_calls) and that no wait was left hanging.
#include <gtest/gtest.h>
#include <pthread.h>

#include "tests/unit/backend/device_staging_support.h"

namespace sketchccl::backend {
namespace {

struct Shape {
  const char* name;
  int queues;
  bool launch_blocking;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name;
}
std::string shape_name(const ::testing::TestParamInfo<Shape>& i) {
  return i.param.name;
}
const auto kShapes =
    ::testing::Values(Shape{"EightQueues", 8, false}, Shape{"OneQueue", 1, false},
                      Shape{"LaunchBlocking", 8, true}, Shape{"LaunchBlockingOneQueue", 1, true});

class Staged : public ::testing::TestWithParam<Shape> {
 protected:
  ModelOptions options() const {
    ModelOptions o;
    o.queues = GetParam().queues;
    o.launch_blocking = GetParam().launch_blocking;
    o.hang_s = 15;
    return o;
  }
};

constexpr size_t kN = 4099;

// Per rank, on its own thread and stream, three calls back to back as DDP's buckets: the
// application's slow work writes each input on the stream, then the call, then work after it
// reads the result. The call returns before the stream reached it (without launch blocking); the
// proxy reads the input the work before wrote (else the sum is wrong); the result is in recv
// only when the stream got past the call; out of place, then in place. In chunks of 4 KiB: each
// of the input's 4 chunks is read only after its own flag, each of the result's copied back after
// its own.
TEST_P(Staged, TheCallReturnsAtOnceAndTheStreamIsOrdered) {
  ModelDevice model(options());
  InstalledModel installed(&model);
  const uint64_t proxy_before = model.proxy_calls();
  constexpr int kCalls = 3, kRanks = 2;
  {
    Ranks ranks(kRanks, chunked(exact_settings(10), 4096, 1024));
    std::vector<std::thread> threads;
    std::vector<std::string> bad(kRanks);
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        ModelDevice::set_current_device(r);
        void* stream = model.create_stream(r);
        std::vector<std::vector<float>> x(kCalls, std::vector<float>(kN, 0.f));
        std::vector<std::vector<float>> y(kCalls, std::vector<float>(kN, -1.f));
        std::vector<std::vector<float>> seen(kCalls);
        std::string& err = bad[static_cast<size_t>(r)];
        for (int k = 0; k < kCalls; ++k) {
          const bool inplace = k == 2;
          float* xp = x[static_cast<size_t>(k)].data();
          float* yp = inplace ? xp : y[static_cast<size_t>(k)].data();
          auto written = std::make_shared<std::atomic<bool>>(false);
          const int delay_ms = k == 0 ? 300 : 20;
          model.host_work(r, stream, [=] {
            std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            for (size_t i = 0; i < kN; ++i)
              xp[i] = input(r, k, i);
            written->store(true);
          });
          const auto t0 = Clock::now();
          const Status st = ranks[r].submit_reduction_stream(device_args(xp, yp, kN), stream);
          const double took = seconds_since(t0);
          if (!st.ok()) err += " call " + std::to_string(k) + ": " + st.to_string();
          if (k == 0 && !GetParam().launch_blocking) {
            if (written->load() || took > 0.2) {
              err += " the call waited for the stream (" + std::to_string(took) + " s)";
            }
            if (y[0][0] != -1.f) err += " recv written before the stream reached the call";
          }
          std::vector<float>* s = &seen[static_cast<size_t>(k)];
          model.host_work(r, stream, [=] { s->assign(yp, yp + kN); });
        }
        if (!model.drain(r, stream, 30)) err += " the stream never drained";
        for (int k = 0; k < kCalls; ++k) {
          const auto& s = seen[static_cast<size_t>(k)];
          if (s.size() != kN) {
            err += " call " + std::to_string(k) + " not seen";
            continue;
          }
          for (size_t i = 0; i < kN; ++i) {
            if (s[i] != sum_of(kRanks, k, i)) {
              err += " call " + std::to_string(k) + " element " + std::to_string(i) + " is " +
                     std::to_string(s[i]);
              break;
            }
          }
        }
      });
    }
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(bad[static_cast<size_t>(r)].empty()) << "rank " << r << ":" << bad[r];
    for (int r = 0; r < kRanks; ++r)
      EXPECT_EQ(ranks[r].stats().proxy_cuda_calls, proxy_before);
    // Each call, 16396 bytes in chunks of 4 KiB (5 each way): per chunk a copy in and its ready,
    // per chunk a wait and a copy back, then back; nothing else on the stream.
    constexpr int kChunks = 5;
    EXPECT_EQ(model.counts().copy_async, 2 * kChunks * kCalls * kRanks);
    EXPECT_EQ(model.counts().write_flag, (kChunks + 1) * kCalls * kRanks);
    EXPECT_EQ(model.counts().wait_flag, kChunks * kCalls * kRanks);
  }
  expect_clean(model, proxy_before);
  EXPECT_EQ(model.outstanding_staging(), 0u) << "staging blocks leaked";
}

// Two communicators of each rank on two streams of one hardware queue (one queue: every stream
// is on it), both ranks enqueueing A then B: B's copy waits behind A's wait on the queue, which
// only A's proxy releases. Each rank's calls come from one thread, as a training step's do.
TEST_P(Staged, TwoCommunicatorsOnStreamsSharingAQueue) {
  ModelDevice model(options());
  InstalledModel installed(&model);
  const uint64_t proxy_before = model.proxy_calls();
  constexpr int kRanks = 2;
  {
    Ranks a(kRanks, exact_settings(10)), b(kRanks, exact_settings(10));
    std::vector<std::string> bad(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        ModelDevice::set_current_device(r);
        void* sa = model.create_stream(r);
        void* sb = model.create_stream(r);
        if (GetParam().queues == 1 && model.queue_of_stream(r, sa) != model.queue_of_stream(r, sb))
          bad[static_cast<size_t>(r)] += " streams on distinct queues";
        std::vector<float> xa(kN), xb(kN), ya(kN, -1.f), yb(kN, -1.f);
        for (size_t i = 0; i < kN; ++i) {
          xa[i] = input(r, 0, i);
          xb[i] = input(r, 1, i);
        }
        for (int round = 0; round < 2; ++round) {
          Status st = a[r].submit_reduction_stream(device_args(xa.data(), ya.data(), kN), sa);
          if (st.ok()) st = b[r].submit_reduction_stream(device_args(xb.data(), yb.data(), kN), sb);
          if (!st.ok()) bad[static_cast<size_t>(r)] += " " + st.to_string();
        }
        if (!model.drain(r, sa, 30) || !model.drain(r, sb, 30))
          bad[static_cast<size_t>(r)] += " a stream never drained";
        for (size_t i = 0; i < kN; ++i) {
          if (ya[i] != sum_of(kRanks, 0, i) || yb[i] != sum_of(kRanks, 1, i)) {
            bad[static_cast<size_t>(r)] += " wrong sum at " + std::to_string(i);
            break;
          }
        }
      });
    }
    for (auto& t : threads)
      t.join();
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(bad[static_cast<size_t>(r)].empty()) << "rank " << r << ":" << bad[r];
  }
  expect_clean(model, proxy_before);
  EXPECT_EQ(model.outstanding_staging(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Staged, kShapes, shape_name);

// ReduceScatter: recv holds count / nranks elements, this rank's chunk of the sum; not one more
// byte is written (a guard after it stays).
TEST_F(DeviceStaging, AReduceScatterCopiesBackItsOutputOnly) {
  constexpr int kRanks = 3;
  constexpr size_t R = 1027;
  {
    Ranks ranks(kRanks, exact_settings(10));
    std::vector<std::vector<float>> x(kRanks), y(kRanks);
    std::vector<void*> streams;
    DrainAtExit drained(model());
    for (int r = 0; r < kRanks; ++r) {
      x[r].resize(R * kRanks);
      for (size_t i = 0; i < x[r].size(); ++i)
        x[r][i] = input(r, static_cast<int>(i / R), i % R);
      y[r].assign(R + 64, -7.f);
      streams.push_back(model().create_stream(r));
      ASSERT_TRUE(ranks[r]
                      .submit_reduction_stream(device_args(x[r].data(), y[r].data(), R * kRanks,
                                                           coll::CallKind::kReduceScatter),
                                               streams.back())
                      .ok());
    }
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(model().drain(r, streams[static_cast<size_t>(r)], 30));
      for (size_t i = 0; i < R; ++i)
        ASSERT_EQ(y[r][i], sum_of(kRanks, r, i)) << "rank " << r << " element " << i;
      for (size_t i = R; i < y[r].size(); ++i)
        ASSERT_EQ(y[r][i], -7.f) << "rank " << r << " wrote past its output at " << i;
    }
  }
  EXPECT_EQ(model().outstanding_staging(), 0u);
}

// The device call's result is the host call's, bit for bit, with a lossy codec (so that the
// comparison means something: the result is not the exact sum). The codec's randomness is drawn
// from the call's sequence number, so the host calls run on communicators made alike whose calls
// come in the same order: call k of each is the same call.
TEST_F(DeviceStaging, ResultsAreBitIdenticalToTheHostCall) {
  constexpr int kRanks = 2;
  constexpr size_t n = size_t(1) << 16;
  Ranks dev(kRanks, lossy_settings(10)), host(kRanks, lossy_settings(10));
  for (auto kind : {coll::CallKind::kAllReduce, coll::CallKind::kReduceScatter}) {
    const size_t out_n = kind == coll::CallKind::kAllReduce ? n : n / kRanks;
    std::vector<std::vector<float>> xd(kRanks), xh(kRanks), yd(kRanks), yh(kRanks);
    std::vector<void*> streams;
    DrainAtExit drained(model());
    for (int r = 0; r < kRanks; ++r) {
      xd[r].resize(n);
      for (size_t i = 0; i < n; ++i)
        xd[r][i] = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(r + 1)) * 3.f;
      xh[r] = xd[r];
      yd[r].assign(out_n, -1.f);
      yh[r].assign(out_n, -2.f);
      streams.push_back(model().create_stream(r));
      ASSERT_TRUE(dev[r]
                      .submit_reduction_stream(device_args(xd[r].data(), yd[r].data(), n, kind),
                                               streams.back())
                      .ok());
    }
    std::vector<std::shared_ptr<coll::Work>> works;
    for (int r = 0; r < kRanks; ++r) {
      coll::ReductionArgs a = device_args(xh[r].data(), yh[r].data(), n, kind);
      a.mem = MemoryType::kHost;
      works.push_back(host[r].submit_reduction(a));
    }
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(model().drain(r, streams[static_cast<size_t>(r)], 30));
      ASSERT_TRUE(works[static_cast<size_t>(r)]->wait().ok());
      EXPECT_EQ(std::memcmp(yd[r].data(), yh[r].data(), out_n * sizeof(float)), 0)
          << "rank " << r << ": the device call's result differs from the host call's";
      size_t inexact = 0;
      for (size_t i = 0; i < out_n; ++i) {
        const size_t at = kind == coll::CallKind::kAllReduce ? i : r * out_n + i;
        float exact = 0;
        for (int p = 0; p < kRanks; ++p)
          exact += xd[p][at];
        inexact += yd[r][i] != exact ? 1 : 0;
      }
      EXPECT_GT(inexact, out_n / 10) << "the codec was not lossy: the comparison proves nothing";
    }
  }
}

// The stager keeps the block once the stream copied the result back: the next call of the same
// size reuses it (no allocation); calls in flight at once hold distinct blocks.
TEST_F(DeviceStaging, BlocksAreReusedOnceCopiedBackAndDistinctInFlight) {
  constexpr size_t n = 1024;
  {
    Ranks ranks(1, exact_settings(10));
    void* stream = model().create_stream(0);
    std::vector<float> x(n, 1.f), y(n, 0.f);
    DrainAtExit drained(model());
    const PoolFigures f0 = process_pool_figures(PoolKind::kPinnedStaging, 0);
    ASSERT_TRUE(ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), n), stream).ok());
    ASSERT_TRUE(model().drain(0, stream, 30));
    const int allocs = model().counts().alloc_staging;
    ASSERT_TRUE(ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), n), stream).ok());
    ASSERT_TRUE(model().drain(0, stream, 30));
    const PoolFigures f1 = process_pool_figures(PoolKind::kPinnedStaging, 0);
    EXPECT_EQ(model().counts().alloc_staging, allocs) << "the second call allocated";
    EXPECT_EQ(f1.leases - f0.leases, 2u);
    EXPECT_EQ(f1.reuses - f0.reuses, 1u);
    EXPECT_EQ(ranks[0].stats().process_pinned_packets.reuses, f1.reuses);

    // Three calls while the stream is held behind the application's work: three blocks.
    auto latch = std::make_shared<Latch>();
    model().host_work(0, stream, [latch] { latch->wait(); });
    std::vector<std::vector<float>> xs(3, std::vector<float>(n)), ys(3, std::vector<float>(n));
    DrainAtExit drained_too(model());
    for (int k = 0; k < 3; ++k) {
      for (size_t i = 0; i < n; ++i)
        xs[k][i] = static_cast<float>(k * 1000 + static_cast<int>(i));
      ASSERT_TRUE(ranks[0]
                      .submit_reduction_stream(device_args(xs[k].data(), ys[k].data(), n), stream)
                      .ok());
    }
    EXPECT_EQ(model().outstanding_staging(), 3u) << "calls in flight share a block";
    EXPECT_GT(ranks[0].stats().pinned_bytes, 0u);
    latch->release();
    ASSERT_TRUE(model().drain(0, stream, 30));
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(xs[k], ys[k]) << "call " << k;  // one rank: the sum is the input
    const int before = model().counts().alloc_staging;
    ASSERT_TRUE(ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), n), stream).ok());
    ASSERT_TRUE(model().drain(0, stream, 30));
    EXPECT_EQ(model().counts().alloc_staging, before) << "a block copied back was not reused";
  }
  EXPECT_EQ(model().outstanding_staging(), 0u);
}

// Calls in flight hold their blocks until their streams copy back: past the bound on what they
// may hold, the next call's caller waits for the oldest to finish (as NCCL's caller waits on a
// full work queue) instead of pinning more; inside a group's launch (may_wait false) it does not.
TEST_F(DeviceStaging, CallsInFlightPastTheBoundWaitForTheOldest) {
  constexpr size_t n = 4096;  // 16 KiB in and out: blocks of about 33 KiB
  struct Bound {
    Bound() { set_staging_in_flight_bound_for_test(size_t(80) << 10); }
    ~Bound() { set_staging_in_flight_bound_for_test(size_t(1) << 30); }
  } bound;
  Ranks ranks(1, exact_settings(30));
  void* stream = model().create_stream(0);
  std::vector<std::vector<float>> xs(4, std::vector<float>(n)), ys(4, std::vector<float>(n));
  for (int k = 0; k < 4; ++k)
    for (size_t i = 0; i < n; ++i)
      xs[k][i] = static_cast<float>(k * 7 + static_cast<int>(i % 11));
  DrainAtExit drained(model());
  auto latch = std::make_shared<Latch>();
  model().host_work(0, stream, [latch] { latch->wait(); });
  for (int k = 0; k < 2; ++k) {  // two blocks: under the bound
    ASSERT_TRUE(
        ranks[0].submit_reduction_stream(device_args(xs[k].data(), ys[k].data(), n), stream).ok());
  }
  EXPECT_EQ(model().outstanding_staging(), 2u);
  std::atomic<bool> released{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    released = true;
    latch->release();
  });
  const auto t0 = Clock::now();
  ASSERT_TRUE(
      ranks[0].submit_reduction_stream(device_args(xs[2].data(), ys[2].data(), n), stream).ok());
  EXPECT_TRUE(released.load()) << "the third call did not wait for the first two";
  EXPECT_GE(seconds_since(t0), 0.25);
  opener.join();
  ASSERT_TRUE(model().drain(0, stream, 30));
  EXPECT_LE(model().outstanding_staging(), 2u) << "the third call pinned a third block";
  // In a group's launch the caller never waits: the block is added.
  auto latch2 = std::make_shared<Latch>();
  model().host_work(0, stream, [latch2] { latch2->wait(); });
  for (int k = 0; k < 4; ++k) {
    coll::Communicator::StreamCall call;
    ASSERT_TRUE(ranks[0]
                    .stage_reduction_stream(device_args(xs[k].data(), ys[k].data(), n), &call,
                                            /*may_wait=*/false)
                    .ok());
    ASSERT_TRUE(ranks[0].enqueue_stream_head(call, stream).ok());
    ASSERT_TRUE(ranks[0].enqueue_stream_tail(call, stream).ok());
  }
  EXPECT_GE(model().outstanding_staging(), 4u);
  latch2->release();
  ASSERT_TRUE(model().drain(0, stream, 30));
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(xs[k], ys[k]) << "call " << k;  // one rank: the sum is the input
}

// A device path that cannot be prepared: one WARN, the predicate the take-over asks says no, and
// no later call retries it.
TEST_F(DeviceStaging, PrepareFailureIsKeptAndWarnedOnce) {
  testutil::AllowWarnings allow("device path could not be built");
  model().fail_prepare(true);
  Ranks ranks(1, exact_settings(5), /*standalone=*/false);
  EXPECT_FALSE(ranks[0].device_path_usable(MemoryType::kDevice));
  EXPECT_FALSE(ranks[0].device_path_usable(MemoryType::kDevice));
  EXPECT_TRUE(ranks[0].device_path_usable(MemoryType::kHost));
  std::vector<float> x(16, 1.f);
  const Status st = ranks[0].submit_reduction_stream(device_args(x.data(), x.data(), x.size()),
                                                     model().create_stream(0));
  EXPECT_EQ(st.code(), Code::kUnhandledCudaError);
  EXPECT_NE(st.message().find("no kernel image"), std::string::npos) << st.message();
  EXPECT_EQ(model().counts().prepare, 1);
  EXPECT_EQ(model().prepare_devices(), std::vector<int>({0}));
  EXPECT_EQ(model().counts().stream_ops(), 0);
  EXPECT_EQ(allow.count(), 1);
  EXPECT_TRUE(ranks[0].async_error().ok()) << ranks[0].async_error().to_string();
}

// No pinned memory: the call fails on the caller's thread, nothing is enqueued or queued, the
// communicator has not failed, and the next call (memory back) runs.
TEST_F(DeviceStaging, NoStagingMemoryFailsTheCallAlone) {
  Ranks ranks(1, exact_settings(5));
  void* stream = model().create_stream(0);
  std::vector<float> x(1 << 20, 2.f), y(1 << 20, 0.f);  // larger than any block kept so far
  DrainAtExit drained(model());
  model().fail_alloc_staging(true);
  const Status st =
      ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), x.size()), stream);
  EXPECT_EQ(st.code(), Code::kSystemError) << st.to_string();
  EXPECT_EQ(model().counts().stream_ops(), 0);
  model().fail_alloc_staging(false);
  ASSERT_TRUE(
      ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), x.size()), stream).ok());
  ASSERT_TRUE(model().drain(0, stream, 30));
  EXPECT_EQ(x, y);
  EXPECT_TRUE(ranks[0].async_error().ok());
}

// An enqueue that fails before `ready` was enqueued cancels the call on every rank alike: no
// proxy runs it nor waits for it (the next call, with a long timeout, completes at once), recv
// is untouched, the communicators have not failed; where nothing was enqueued the block is
// reused at once.
struct EnqueueFault {
  const char* name;
  int op;  // 0: the copy in, 1: the ready flag
};

class CancelledBeforeReady : public DeviceStaging,
                             public ::testing::WithParamInterface<EnqueueFault> {};

TEST_P(CancelledBeforeReady, NoProxyRunsItAndTheRingStaysInStep) {
  // The block the copy in may still write is abandoned when the communicator ends.
  testutil::AllowWarnings abandoned("never reused");
  constexpr int kRanks = 2;
  constexpr size_t n = 2048;
  {
    Ranks ranks(kRanks, exact_settings(60));
    RankCalls calls(model(), kRanks, n);
    auto& [streams, x, y] = calls;
    DrainAtExit drained(model());
    const int allocs = model().counts().alloc_staging;
    for (int r = 0; r < kRanks; ++r) {
      if (GetParam().op == 0) model().fail_copy_in(1);
      if (GetParam().op == 1) model().fail_write_flag_in(1);
      const Status st =
          ranks[r].submit_reduction_stream(device_args(x[r].data(), y[r].data(), n), streams[r]);
      EXPECT_EQ(st.code(), Code::kUnhandledCudaError) << st.to_string();
    }
    const auto t0 = Clock::now();
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(ranks[r]
                      .submit_reduction_stream(device_args(x[r].data(), y[r].data(), n), streams[r])
                      .ok());
    }
    // Every stream drained before any check can return: the model must not write a buffer gone.
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(model().drain(r, streams[r], 30));
    for (int r = 0; r < kRanks; ++r) {
      for (size_t i = 0; i < n; ++i) {
        if (y[r][i] == sum_of(kRanks, 0, i)) continue;
        ADD_FAILURE() << "rank " << r << " element " << i << " is " << y[r][i];
        break;
      }
    }
    EXPECT_LT(seconds_since(t0), 5) << "a proxy waited for a cancelled call";
    for (int r = 0; r < kRanks; ++r)
      EXPECT_TRUE(ranks[r].async_error().ok()) << ranks[r].async_error().to_string();
    if (GetParam().op == 0) {
      // Nothing was enqueued: the cancelled call's block was reused by the next.
      EXPECT_EQ(model().counts().alloc_staging, allocs + kRanks);
    } else {
      // The copy in may still write the block: it stays held, the next call takes another.
      EXPECT_EQ(model().counts().alloc_staging, allocs + 2 * kRanks);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, CancelledBeforeReady,
                         ::testing::Values(EnqueueFault{"CopyIn", 0}, EnqueueFault{"Ready", 1}),
                         [](const ::testing::TestParamInfo<EnqueueFault>& i) {
                           return std::string(i.param.name);
                         });

// An enqueue that fails after `ready` was enqueued: the call is the proxy's from then on. Rank
// 0's wait (or its copy back) fails; its proxy still runs the call with rank 1, whose result is
// the sum; rank 0's stream is released all the same (it drains), the error is rank 0's caller's,
// and rank 0's communicator fails (its result never reached its buffer).
class FailedAfterReady : public DeviceStaging,
                         public ::testing::WithParamInterface<EnqueueFault> {};

TEST_P(FailedAfterReady, TheProxyRunsItAndTheStreamIsReleased) {
  // The block whose `back` never comes is abandoned when the communicator ends (after waiting
  // for it as long as the timeout: short here).
  testutil::AllowWarnings abandoned("never reused");
  testutil::AllowWarnings failed("was not copied back");
  constexpr int kRanks = 2;
  constexpr size_t n = 2048;
  Ranks ranks(kRanks, exact_settings(3));
  RankCalls calls(model(), kRanks, n);
  auto& [streams, x, y] = calls;
  DrainAtExit drained(model());
  // Rank 0 first: its call takes the fault.
  if (GetParam().op == 2) model().fail_wait_flag_in(1);
  if (GetParam().op == 3) model().fail_copy_in(2);        // the copy back
  if (GetParam().op == 4) model().fail_write_flag_in(2);  // `back`
  Status st0 =
      ranks[0].submit_reduction_stream(device_args(x[0].data(), y[0].data(), n), streams[0]);
  EXPECT_EQ(st0.code(), Code::kUnhandledCudaError) << st0.to_string();
  ASSERT_TRUE(
      ranks[1].submit_reduction_stream(device_args(x[1].data(), y[1].data(), n), streams[1]).ok());
  for (int r = 0; r < kRanks; ++r)
    ASSERT_TRUE(model().drain(r, streams[r], 30)) << "rank " << r << "'s stream was never released";
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(y[1][i], sum_of(kRanks, 0, i)) << "rank 0's proxy did not run the call";
  if (GetParam().op == 4) {
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(y[0][i], sum_of(kRanks, 0, i)) << "rank 0's copy back was enqueued";
  }
  // Rank 0's communicator failed once its proxy ran the call: its next call is refused at once,
  // while rank 1's communicator is fine.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ranks[0].async_error().ok() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(ranks[0].async_error().code(), Code::kUnhandledCudaError)
      << ranks[0].async_error().to_string();
  EXPECT_FALSE(
      ranks[0].submit_reduction_stream(device_args(x[0].data(), y[0].data(), n), streams[0]).ok());
  EXPECT_TRUE(ranks[1].async_error().ok()) << ranks[1].async_error().to_string();
}

INSTANTIATE_TEST_SUITE_P(Faults, FailedAfterReady,
                         ::testing::Values(EnqueueFault{"Wait", 2}, EnqueueFault{"CopyBack", 3},
                                           EnqueueFault{"Back", 4}),
                         [](const ::testing::TestParamInfo<EnqueueFault>& i) {
                           return std::string(i.param.name);
                         });

// One thread drives two ranks on one device and ONE stream, as a group's end does: every call is
// staged, then every head (input copy and flag), then every tail (wait, copy back). Rank 1's input
// flag is on the stream before rank 0's wait, so neither rank's proxy waits for the other's
// stream; in the order head, tail, head, tail it would (rank 1's flag behind rank 0's wait).
TEST_F(DeviceStaging, OneThreadsRanksOnOneStreamStageAndHeadBeforeAnyTail) {
  constexpr int kRanks = 2;
  constexpr size_t n = 4096;
  Ranks ranks(kRanks, exact_settings(20), true, true);
  ModelDevice::set_current_device(0);
  void* stream = model().create_stream(0);
  std::vector<std::vector<float>> x(kRanks), y(kRanks);
  DrainAtExit drained(model());
  std::vector<coll::Communicator::StreamCall> calls(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    x[r].resize(n);
    for (size_t i = 0; i < n; ++i)
      x[r][i] = input(r, 0, i);
    y[r].assign(n, -1.f);
    ASSERT_TRUE(
        ranks[r].stage_reduction_stream(device_args(x[r].data(), y[r].data(), n), &calls[r]).ok());
  }
  for (int r = 0; r < kRanks; ++r)
    ASSERT_TRUE(ranks[r].enqueue_stream_head(calls[r], stream).ok());
  for (int r = 0; r < kRanks; ++r)
    ASSERT_TRUE(ranks[r].enqueue_stream_tail(calls[r], stream).ok());
  ASSERT_TRUE(model().drain(0, stream, 30)) << "the ranks waited for each other";
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(y[r][i], sum_of(kRanks, 0, i)) << "rank " << r << " element " << i;
    EXPECT_TRUE(ranks[r].async_error().ok()) << ranks[r].async_error().to_string();
  }
}

// Abort while the caller's stream waits: rank 1 never calls, so rank 0's proxy waits in the ring
// and rank 0's stream waits for its flag; the abort ends the work, which releases the stream.
TEST_F(DeviceStaging, AbortWhileTheStreamWaitsReleasesTheStream) {
  testutil::AllowWarnings allow("failed");
  Ranks ranks(2, exact_settings(60));
  void* stream = model().create_stream(0);
  std::vector<float> x(1024, 1.f), y(1024, -1.f);
  DrainAtExit drained(model());
  ASSERT_TRUE(
      ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), x.size()), stream).ok());
  EXPECT_FALSE(model().drain(0, stream, 0.5)) << "the stream went on before the call ran";
  const auto t0 = Clock::now();
  ranks[0].abort();
  EXPECT_TRUE(model().drain(0, stream, 10)) << "the abort did not release the stream";
  EXPECT_LT(seconds_since(t0), 5);
}

// Abort while the proxy waits for the stream (held behind the application's work): the proxy
// gives up at once, and the stream, once it gets there, goes through.
TEST_F(DeviceStaging, AbortWhileTheProxyWaitsForTheStream) {
  testutil::AllowWarnings allow("failed");
  Ranks ranks(2, exact_settings(60));
  std::vector<void*> streams = {model().create_stream(0), model().create_stream(1)};
  auto latch = std::make_shared<Latch>();
  model().host_work(0, streams[0], [latch] { latch->wait(); });
  std::vector<float> x(1024, 1.f), y(1024, -1.f);
  DrainAtExit drained(model());
  ASSERT_TRUE(
      ranks[0].submit_reduction_stream(device_args(x.data(), y.data(), x.size()), streams[0]).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  ranks[0].abort();  // joins the proxy: it must not wait for the held stream
  EXPECT_LT(seconds_since(t0), 5) << "the proxy waited for the stream past the abort";
  latch->release();
  EXPECT_TRUE(model().drain(0, streams[0], 10)) << "the stream was not released";
}

// The model's own check: a call made on a thread named as a communicator's proxy and marked as one
// is a violation of the model and counted by the runtime (so that the zero in every test above
// means something). Last: the runtime's count is the process's.
TEST(ModelDeviceSelfCheck, ACallOnAProxyThreadIsRecorded) {
  testutil::AllowWarnings allow("proxy thread");
  ModelDevice model;
  InstalledModel installed(&model);
  const uint64_t before = model.proxy_calls();
  std::thread t([&] {
    pthread_setname_np(pthread_self(), "sccl-proxy");
    ProxyThreadMark mark;
    device_runtime().current_device();
  });
  t.join();
  EXPECT_EQ(model.violations().size(), 1u);
  EXPECT_EQ(model.proxy_calls(), before + 1);
}

}  // namespace
}  // namespace sketchccl::backend
