// What the staged device call's tests share (device_staging_protocol_test.cc and
// device_staging_chunks_test.cc): in-process communicators over the host model of the GPU
// (tests/support/model_device.h), their settings, inputs and the fixture that checks that every
// test left no proxy call and no hanging wait behind. Included by one test file per binary.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"
#include "src/coll/comm.h"
#include "tests/support/model_device.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::backend {

using Clock = std::chrono::steady_clock;
using testutil::DrainAtExit;
using testutil::InstalledModel;
using testutil::ModelDevice;
using testutil::ModelOptions;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The socket transport: the protocol under test needs no UCX, and under ThreadSanitizer UCX's
// shared-memory mappings now and then land where TSan cannot map their shadow (it then aborts).
inline const int kSocketTransport = setenv("SKETCHCCL_TRANSPORT", "socket", 0);

inline coll::Settings exact_settings(double timeout_s) {
  coll::Settings s;
  s.auto_codec = false;
  s.codec = kernels::CodecId::kNone;
  s.timeout_s = timeout_s;
  return s;
}

// A lossy codec whose result depends only on the inputs (no error feedback, no guard).
inline coll::Settings lossy_settings(double timeout_s) {
  coll::Settings s = exact_settings(timeout_s);
  s.codec = kernels::CodecId::kQ8;
  s.error_feedback = false;
  s.max_nmse = 0;
  return s;
}

// `s` with staged calls cut in chunks of at least `chunk` bytes and slices of `slice_elems`.
inline coll::Settings chunked(coll::Settings s, size_t chunk,
                              size_t slice_elems = size_t(16) << 10) {
  s.stage_chunk_bytes = chunk;
  s.slice_elems = slice_elems;
  return s;
}

// `n` in-process ranks of one communicator; rank r on device r of the model (each rank its own
// GPU, as on hardware), or all on device 0 (`one_device`). Destroyed before the model: the last
// stager trims the staging pool through the model that allocated it.
struct Ranks {
  std::vector<std::shared_ptr<coll::Communicator>> comms;
  Ranks(int n, const coll::Settings& settings, bool standalone = true, bool one_device = false) {
    coll::UniqueId id{};
    EXPECT_TRUE(coll::Communicator::bootstrap_make_id(&id).ok());
    for (int r = 0; r < n; ++r) {
      coll::Communicator::InitArgs a;
      a.rank = r;
      a.nranks = n;
      a.id = id;
      a.cuda_device = one_device ? 0 : r;
      a.standalone = standalone;
      comms.push_back(coll::Communicator::create(a, settings, 1));
    }
    for (auto& c : comms)
      EXPECT_TRUE(c->init_work()->wait().ok());
  }
  // A device call's stream is released once its result is final, while the proxy may still be
  // finishing its sends to the other ranks: each proxy first runs out its queue (a no-op queued
  // last, waited for at most 10 s in all: a test may have left a call stalled), then aborts.
  ~Ranks() {
    std::vector<std::shared_ptr<coll::Work>> last;
    for (auto& c : comms)
      last.push_back(c->submit_exact([](const coll::PeerLink&) { return Status::Ok(); }, false));
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (auto& w : last)
      while (!w->done() && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (auto& c : comms)
      c->abort();
  }
  coll::Communicator& operator[](int r) { return *comms[static_cast<size_t>(r)]; }
};

inline coll::ReductionArgs device_args(const float* send, float* recv, size_t count,
                                       coll::CallKind kind = coll::CallKind::kAllReduce) {
  coll::ReductionArgs a;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.type = kernels::ElemType::kF32;
  a.mem = MemoryType::kDevice;
  a.kind = kind;
  return a;
}

// rank r's input of call k; the sum over n ranks at element i.
inline float input(int r, int k, size_t i) {
  return static_cast<float>((r + 1) * (k + 1)) + static_cast<float>(i % 5);
}
inline float sum_of(int nranks, int k, size_t i) {
  float s = 0;
  for (int r = 0; r < nranks; ++r)
    s += input(r, k, i);
  return s;
}

// What every test ends with: no call on the proxy, no wait that could never end, and once the
// communicators are gone, every staging block back (call it after `ranks` is destroyed).
inline void expect_clean(const ModelDevice& model, uint64_t proxy_calls_before) {
  EXPECT_TRUE(model.violations().empty()) << model.violations().front();
  EXPECT_TRUE(model.hangs().empty()) << model.hangs().front();
  EXPECT_EQ(model.proxy_calls(), proxy_calls_before) << "a device runtime call on a proxy";
}

// A latch the application's work on a stream waits for: the stream is held behind it.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), [this] { return open; });
  }
};

// Both ranks' calls submitted from one thread (each returns at once): the rank order of the
// enqueues does not matter, each rank is its own device.
class DeviceStaging : public ::testing::Test {
 protected:
  void SetUp() override {
    ModelOptions o;
    o.hang_s = 15;
    model_ = std::make_unique<ModelDevice>(o);
    installed_ = std::make_unique<InstalledModel>(model_.get());
    proxy_before_ = model_->proxy_calls();
  }
  void TearDown() override {
    installed_.reset();
    expect_clean(*model_, proxy_before_);
    model_.reset();
  }
  ModelDevice& model() { return *model_; }
  std::unique_ptr<ModelDevice> model_;
  std::unique_ptr<InstalledModel> installed_;
  uint64_t proxy_before_ = 0;
  // Over UCX (where it is installed) an abort leaves a posted receive UCX warns about.
  testutil::AllowWarnings ucx_abort_{"was not matched"};
};

// Each rank's stream on its own device, its call-0 inputs and a result buffer of -1s.
struct RankCalls {
  std::vector<void*> streams;
  std::vector<std::vector<float>> x, y;
  RankCalls(ModelDevice& model, int ranks, size_t n) : x(ranks), y(ranks) {
    for (int r = 0; r < ranks; ++r) {
      streams.push_back(model.create_stream(r));
      x[r].resize(n);
      for (size_t i = 0; i < n; ++i)
        x[r][i] = input(r, 0, i);
      y[r].assign(n, -1.f);
    }
  }
};

}  // namespace sketchccl::backend
