// The stream gate's protocol (docs/cuda.md, "The stream gate") against a host model of the device
// that has the hazards of the hardware: streams mapped onto a few hardware queues, each of which
// runs its work strictly in order (a spinning kernel or a host function at its head blocks every
// stream behind it), and optionally launches that return only once their work ended
// (CUDA_LAUNCH_BLOCKING, compute-sanitizer). The model stands in for CUDA behind the backend's
// interface (device_runtime.h): the gate, the device backend (the host kernels, run as work on a
// stream of its own) and draining a caller's stream. Two in-process ranks run real AllReduces
// through Communicator::submit_allreduce_stream, with work before and after them on the caller's
// stream, and the model counts every wait that could never have ended on a device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/device_runtime.h"
#include "src/coll/comm.h"
#include "tests/unit/warn_guard.h"

namespace sketchccl::backend {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int queues = 8;                // hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)
  bool launch_blocking = false;  // a launch returns once its work ended
  StreamEnv env;                 // what the mode is decided from
  bool force_gated = false;      // the gate whatever env says (to test its ordering alone)
  bool fail_gate = false;        // make_gate fails, as cudaHostRegister does in some containers
  double hang_s = 10;            // a wait this long could never end on a device: counted, given up
};

// One completion, waited for with a bound.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    cv.notify_all();
  }
  bool wait_for(double s) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(s), [this] { return done; });
  }
};

// A hardware queue: its items run one after the other on one thread, whatever stream they came
// from.
class HwQueue {
 public:
  HwQueue() : thread_([this] { loop(); }) {}
  ~HwQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void push(std::function<void()> fn, std::shared_ptr<Done> done) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(fn), std::move(done)});
    cv_.notify_all();
  }

 private:
  struct Item {
    std::function<void()> fn;
    std::shared_ptr<Done> done;
  };
  void loop() {
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
        if (items_.empty()) return;
        it = std::move(items_.front());
        items_.pop_front();
      }
      it.fn();
      it.done->set();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

class ModelDevice;

// The gate on the model: the marker is a host function, the wait a spinning item. Its flag
// outlives it (a wait still queued may read it after the gate is gone, as the real flags do).
class ModelGate final : public StreamGate {
 public:
  struct Flag {
    std::mutex mu;
    std::condition_variable cv;
    uint32_t next = 0, value = 0;
    void release(uint32_t seq) {
      std::lock_guard<std::mutex> lock(mu);
      if (seq > value) value = seq;
      cv.notify_all();
    }
    // The spin kernel's body: runs on the stream's hardware queue until `seq` is released.
    bool spin(uint32_t seq, double hang_s) {
      std::unique_lock<std::mutex> lock(mu);
      return cv.wait_for(lock, std::chrono::duration<double>(hang_s), [&] { return value >= seq; });
    }
  };
  explicit ModelGate(ModelDevice* dev) : dev_(dev) {}
  ~ModelGate() override { release_all(); }
  void reserve(GateTicket* t) override {
    std::lock_guard<std::mutex> lock(flag_->mu);
    t->seq = ++flag_->next;
    t->marker = std::make_shared<GateMarker>();
  }
  Status enqueue(void* stream, const GateTicket& t) override;
  void release(uint32_t seq) override { flag_->release(seq); }
  void release_all() override {
    uint32_t next = 0;
    {
      std::lock_guard<std::mutex> lock(flag_->mu);
      next = flag_->next;
    }
    flag_->release(next);
  }
  bool holding() const override {
    std::lock_guard<std::mutex> lock(flag_->mu);
    return flag_->next > flag_->value;
  }

 private:
  ModelDevice* dev_;
  std::shared_ptr<Flag> flag_ = std::make_shared<Flag>();
};

class ModelDevice final : public DeviceRuntime {
 public:
  explicit ModelDevice(Options o) : opt_(o) {
    for (int i = 0; i < o.queues; ++i)
      queues_.push_back(std::make_unique<HwQueue>());
  }

  // A stream on the next hardware queue, round robin (the driver's assignment).
  void* create_stream() {
    std::lock_guard<std::mutex> lock(mu_);
    void* s = reinterpret_cast<void*>(static_cast<uintptr_t>(stream_queue_.size() + 1));
    stream_queue_[s] = next_queue_++ % static_cast<int>(queues_.size());
    return s;
  }
  // Queues `fn` on the stream's hardware queue; under launch blocking returns once it ran.
  void launch(void* stream, std::function<void()> fn) {
    auto done = std::make_shared<Done>();
    queue_of(stream).push(std::move(fn), done);
    if (opt_.launch_blocking && !done->wait_for(2 * opt_.hang_s)) hang("a blocking launch");
  }
  // A host function: like any item, it blocks its queue until it returns.
  void launch_host_func(void* stream, std::function<void()> fn) { launch(stream, std::move(fn)); }
  // Waits for the stream's work so far (cudaStreamSynchronize), bounded.
  bool drain(void* stream, double s) {
    auto done = std::make_shared<Done>();
    queue_of(stream).push([] {}, done);
    return done->wait_for(s);
  }

  Status make_gate(int, std::unique_ptr<StreamGate>* out) override {
    gate_attempts_++;
    if (opt_.fail_gate) {
      return Status(Code::kUnhandledCudaError,
                    "cudaHostRegister of the stream-gate flags: "
                    "operation not supported (model)");
    }
    gates_made_++;
    *out = std::make_unique<ModelGate>(this);
    return Status::Ok();
  }
  Status make_backend(int, std::unique_ptr<Backend>* out) override;
  Status synchronize(int, void* stream, double timeout_s) override {
    syncs_++;
    if (!drain(stream, timeout_s)) return Status(Code::kRemoteError, "model: drain timed out");
    return Status::Ok();
  }
  StreamMode mode(std::string* why) override {
    if (opt_.force_gated) return StreamMode::kGated;
    return stream_mode(opt_.env, why);
  }

  void hang(const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    hangs_.push_back(what);
  }
  std::vector<std::string> hangs() {
    std::lock_guard<std::mutex> lock(mu_);
    return hangs_;
  }
  const Options& options() const { return opt_; }
  int gates_made() const { return gates_made_.load(); }
  std::atomic<int> gate_attempts_{0};
  std::atomic<int> syncs_{0};

 private:
  HwQueue& queue_of(void* stream) {
    std::lock_guard<std::mutex> lock(mu_);
    return *queues_[static_cast<size_t>(stream_queue_.at(stream))];
  }
  Options opt_;
  std::vector<std::unique_ptr<HwQueue>> queues_;
  std::mutex mu_;
  std::map<void*, int> stream_queue_;
  int next_queue_ = 0;
  std::atomic<int> gates_made_{0};
  std::vector<std::string> hangs_;
};

Status ModelGate::enqueue(void* stream, const GateTicket& t) {
  auto marker = t.marker;
  dev_->launch_host_func(stream, [marker] { marker->fire(); });
  const uint32_t seq = t.seq;
  ModelDevice* dev = dev_;
  std::shared_ptr<Flag> flag = flag_;
  dev_->launch(stream, [dev, flag, seq] {
    if (!flag->spin(seq, dev->options().hang_s)) dev->hang("the gate's wait kernel");
  });
  return Status::Ok();
}

// The host kernels as the device backend: every call is work on the backend's own stream,
// waited for by the proxy with its bounds (a device backend's calls return with their results
// in place).
class ModelBackend final : public Backend {
 public:
  ModelBackend(ModelDevice* dev, void* stream)
      : dev_(dev), stream_(stream), host_(make_host_backend()) {}
  const char* name() const override { return "model"; }
  MemoryType memory_type() const override { return MemoryType::kDevice; }
  void bound_waits(const std::atomic<bool>* abort, double timeout_s) override {
    abort_ = abort;
    timeout_s_ = timeout_s;
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return run([&] { return host_->copy(dst, src, bytes); });
  }
  size_t packet_bytes(const kernels::CodecParams& p, size_t n) const override {
    return host_->packet_bytes(p, n);
  }
  Status encode(const kernels::CodecParams& p, const void* x, kernels::ElemType t, size_t n,
                void* pkt, size_t cap) override {
    return run([&] { return host_->encode(p, x, t, n, pkt, cap); });
  }
  Status step(const kernels::CodecParams& p, const void* in, size_t in_bytes, const void* x,
              kernels::ElemType t, size_t n, void* out, size_t cap) override {
    return run([&] { return host_->step(p, in, in_bytes, x, t, n, out, cap); });
  }
  Status decode(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y,
                kernels::ElemType t, size_t n, float scale, kernels::DecodeStats* stats) override {
    return run([&] { return host_->decode(p, pkt, bytes, y, t, n, scale, stats); });
  }
  Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) override {
    return host_->alloc_f32(n, out);
  }
  Status ef_compensate(const void* x, kernels::ElemType t, size_t n, const float* residual,
                       float* out) override {
    return run([&] { return host_->ef_compensate(x, t, n, residual, out); });
  }
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override {
    return run([&] { return host_->ef_update(comp, in, out, n, residual, sums); });
  }
  Status bitmap_build(const void* x, kernels::ElemType t, size_t n, uint64_t* bits) override {
    return run([&] { return host_->bitmap_build(x, t, n, bits); });
  }
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    return run([&] { return host_->bitmap_or(acc, other, n); });
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    return run([&] { return host_->bitmap_popcount(bits, n, count); });
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, kernels::ElemType t,
                        float* out, size_t* count) override {
    return run([&] { return host_->sparse_compact(bits, n, x, t, out, count); });
  }
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        kernels::ElemType t, size_t* count) override {
    return run([&] { return host_->sparse_scatter(bits, n, vals, scale, y, t, count); });
  }

 private:
  // The work runs on the backend's stream; the proxy polls for it as the CUDA backend does,
  // giving up past the timeout or on abort (then the work is skipped if it has not started).
  Status run(const std::function<Status()>& fn) {
    struct State {
      std::mutex mu;
      std::condition_variable cv;
      bool cancelled = false, done = false;
      Status result;
    };
    auto st = std::make_shared<State>();
    dev_->launch(stream_, [st, &fn] {
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->cancelled) return;
      st->result = fn();
      st->done = true;
      st->cv.notify_all();
    });
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    std::unique_lock<std::mutex> lock(st->mu);
    while (!st->done) {
      if ((abort_ != nullptr && abort_->load()) || Clock::now() >= deadline) {
        st->cancelled = true;
        dev_->hang("the backend's work behind a held hardware queue");
        return Status(Code::kRemoteError, "model: the backend's stream did not run its work");
      }
      st->cv.wait_for(lock, std::chrono::milliseconds(10));
    }
    return st->result;
  }
  ModelDevice* dev_;
  void* stream_;
  std::unique_ptr<Backend> host_;
  const std::atomic<bool>* abort_ = nullptr;
  double timeout_s_ = 10;
};

Status ModelDevice::make_backend(int, std::unique_ptr<Backend>* out) {
  *out = std::make_unique<ModelBackend>(this, create_stream());
  return Status::Ok();
}

// Installs the model for the test's scope.
struct Installed {
  explicit Installed(ModelDevice* m) { set_device_runtime_for_test(m); }
  ~Installed() { set_device_runtime_for_test(nullptr); }
};

coll::Settings exact_settings(double timeout_s) {
  coll::Settings s;
  s.auto_codec = false;
  s.codec = kernels::CodecId::kNone;
  s.timeout_s = timeout_s;
  return s;
}

struct RankResult {
  Status submit;
  std::vector<std::vector<float>> seen;  // what work after each AllReduce read on the stream
  bool returned_before_input = false;    // the first call returned before its input was written
};

// Two ranks, each with its own stream on the model: per AllReduce, slow work writes the input on
// the stream, the AllReduce is submitted, and work after it copies the output away. Back to back
// like DDP's buckets, then the stream is drained.
std::vector<RankResult> run_two_ranks(ModelDevice& model, int calls, size_t n,
                                      double timeout_s = 10) {
  const coll::Settings settings = exact_settings(timeout_s);
  coll::UniqueId id{};
  EXPECT_TRUE(coll::Communicator::bootstrap_make_id(&id).ok());
  std::vector<std::shared_ptr<coll::Communicator>> comms;
  for (int r = 0; r < 2; ++r) {
    coll::Communicator::InitArgs a;
    a.rank = r;
    a.nranks = 2;
    a.id = id;
    a.cuda_device = 0;
    comms.push_back(coll::Communicator::create(a, settings, 1));
  }
  for (auto& c : comms)
    EXPECT_TRUE(c->init_work()->wait().ok());
  std::vector<RankResult> out(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = out[static_cast<size_t>(r)];
      void* stream = model.create_stream();
      std::vector<std::vector<float>> x(static_cast<size_t>(calls), std::vector<float>(n, 0.f));
      std::vector<std::vector<float>> y = x;
      res.seen.assign(static_cast<size_t>(calls), {});
      for (int k = 0; k < calls; ++k) {
        auto input_written = std::make_shared<std::atomic<bool>>(false);
        float* xp = x[static_cast<size_t>(k)].data();
        // The first input comes late enough that a gated call surely returns before it.
        const int delay_ms = k == 0 ? 300 : 20;
        model.launch(stream, [=] {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          for (size_t i = 0; i < n; ++i)
            xp[i] = static_cast<float>((r + 1) * (k + 1)) + static_cast<float>(i % 5);
          input_written->store(true);
        });
        coll::AllReduceArgs args;
        args.send = xp;
        args.recv = y[static_cast<size_t>(k)].data();
        args.count = n;
        args.type = kernels::ElemType::kF32;
        args.mem = MemoryType::kDevice;
        std::shared_ptr<coll::Work> sync;
        Status st = comms[static_cast<size_t>(r)]->submit_allreduce_stream(args, stream, &sync);
        if (k == 0) res.returned_before_input = !input_written->load();
        if (st.ok() && sync) st = sync->wait();
        if (!st.ok() && res.submit.ok()) res.submit = st;
        const float* yp = y[static_cast<size_t>(k)].data();
        std::vector<float>* seen = &res.seen[static_cast<size_t>(k)];
        model.launch(stream, [=] { seen->assign(yp, yp + n); });
      }
      EXPECT_TRUE(model.drain(stream, 30)) << "rank " << r << ": the stream never drained";
    });
  }
  for (auto& t : threads)
    t.join();
  for (auto& c : comms)
    c->abort();
  return out;
}

void expect_sums(const std::vector<RankResult>& res, int calls, size_t n) {
  for (size_t r = 0; r < res.size(); ++r) {
    EXPECT_TRUE(res[r].submit.ok()) << "rank " << r << ": " << res[r].submit.to_string();
    for (int k = 0; k < calls; ++k) {
      const auto& seen = res[r].seen[static_cast<size_t>(k)];
      ASSERT_EQ(seen.size(), n) << "rank " << r << " call " << k;
      for (size_t i = 0; i < n; i += 97) {
        const float want = static_cast<float>(3 * (k + 1)) + 2.f * static_cast<float>(i % 5);
        ASSERT_EQ(seen[i], want) << "rank " << r << " call " << k << " element " << i;
      }
    }
  }
}

constexpr size_t kN = 4096;

// The gate's ordering alone: launches that return only when their kernel ended, the gate forced.
// The wait kernel can end only once the proxy ran the AllReduce, so the work must be queued on
// the proxy before the wait is launched.
TEST(StreamGateProtocol, WorkIsQueuedBeforeTheWaitIsLaunched) {
  Options o;
  o.launch_blocking = true;
  o.force_gated = true;
  ModelDevice model(o);
  Installed in(&model);
  auto res = run_two_ranks(model, 2, kN);
  EXPECT_TRUE(model.hangs().empty()) << model.hangs().front();
  expect_sums(res, 2, kN);
  EXPECT_EQ(model.gates_made(), 2);
}

// Eight hardware queues, launches that return at once: the caller's thread returns before the
// work ahead of the AllReduce on its stream ran, and the work after it sees the sum. The second
// call's marker (a host function) waits behind the first call's wait on the same queue.
TEST(StreamGateProtocol, GatedCallReturnsAtOnceAndOrdersTheStream) {
  Options o;
  ModelDevice model(o);
  Installed in(&model);
  auto res = run_two_ranks(model, 3, kN);
  EXPECT_TRUE(model.hangs().empty()) << model.hangs().front();
  expect_sums(res, 3, kN);
  for (const auto& r : res)
    EXPECT_TRUE(r.returned_before_input) << "the gated call blocked its caller";
  EXPECT_EQ(model.syncs_.load(), 0);
}

// The model is as strict as the hazard: with one hardware queue the gate's wait blocks the
// backend's own work queued behind it, and the AllReduce can only time out.
TEST(StreamGateProtocol, ModelDeadlocksAGateOnOneHardwareQueue) {
  testutil::AllowWarnings allow("failed");
  Options o;
  o.queues = 1;
  o.force_gated = true;
  o.hang_s = 2;
  ModelDevice model(o);
  Installed in(&model);
  auto res = run_two_ranks(model, 1, kN, /*timeout_s=*/1);
  EXPECT_FALSE(model.hangs().empty());
}

// Without a gate where one would deadlock: each case's launches and queues as the hardware has
// them, and the environment that names it.
struct UngatedCase {
  const char* name;
  int queues;
  bool launch_blocking;
  StreamEnv env;
};

void PrintTo(const UngatedCase& c, std::ostream* os) {
  *os << c.name;
}

class Ungated : public ::testing::TestWithParam<UngatedCase> {};

TEST_P(Ungated, RunsSynchronouslyWithoutAGate) {
  Options o;
  o.queues = GetParam().queues;
  o.launch_blocking = GetParam().launch_blocking;
  o.env = GetParam().env;
  o.hang_s = 5;
  ModelDevice model(o);
  Installed in(&model);
  auto res = run_two_ranks(model, 2, kN, /*timeout_s=*/10);
  EXPECT_TRUE(model.hangs().empty()) << model.hangs().front();
  expect_sums(res, 2, kN);
  EXPECT_EQ(model.gates_made(), 0);
  EXPECT_EQ(model.syncs_.load(), 4) << "each call drains its stream first";
}

StreamEnv env_with(bool lb, bool tool, long conns) {
  StreamEnv e;
  e.launch_blocking = lb;
  e.injection_tool = tool;
  e.max_connections = conns;
  return e;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, Ungated,
    ::testing::Values(UngatedCase{"LaunchBlocking", 8, true, env_with(true, false, 8)},
                      UngatedCase{"InjectionTool", 8, true, env_with(false, true, 8)},
                      UngatedCase{"OneHardwareQueue", 1, false, env_with(false, false, 1)}),
    [](const ::testing::TestParamInfo<UngatedCase>& i) { return std::string(i.param.name); });

// A device path that cannot be built (the gate's host registration fails): one WARN, the
// predicate the take-over asks says no, and no later call retries it.
TEST(StreamGateProtocol, DevicePathFailureIsKeptAndWarnedOnce) {
  testutil::AllowWarnings allow("device path could not be built");
  Options o;
  o.fail_gate = true;
  ModelDevice model(o);
  Installed in(&model);
  coll::UniqueId id{};
  ASSERT_TRUE(coll::Communicator::bootstrap_make_id(&id).ok());
  coll::Communicator::InitArgs a;
  a.cuda_device = 0;
  a.id = id;
  a.standalone = false;
  auto c = coll::Communicator::create(a, exact_settings(5), 1);
  ASSERT_TRUE(c->init_work()->wait().ok());
  EXPECT_FALSE(c->device_path_usable(MemoryType::kDevice));
  EXPECT_FALSE(c->device_path_usable(MemoryType::kDevice));
  EXPECT_TRUE(c->device_path_usable(MemoryType::kHost));
  std::vector<float> x(16, 1.f);
  coll::AllReduceArgs args;
  args.send = args.recv = x.data();
  args.count = x.size();
  args.type = kernels::ElemType::kF32;
  args.mem = MemoryType::kDevice;
  Status st = c->submit_allreduce_stream(args, model.create_stream());
  EXPECT_EQ(st.code(), Code::kUnhandledCudaError);
  EXPECT_NE(st.message().find("cudaHostRegister"), std::string::npos) << st.message();
  EXPECT_EQ(model.gate_attempts_.load(), 1);
  EXPECT_EQ(allow.count(), 1);
  c->abort();
}

TEST(StreamMode, TheEnvironmentThatDeadlocksTheGateTurnsItOff) {
  std::string why;
  EXPECT_EQ(stream_mode(env_with(false, false, 8), &why), StreamMode::kGated);
  EXPECT_EQ(stream_mode(env_with(false, false, 2), &why), StreamMode::kGated);
  EXPECT_EQ(stream_mode(env_with(true, false, 8), &why), StreamMode::kSynchronous);
  EXPECT_NE(why.find("CUDA_LAUNCH_BLOCKING"), std::string::npos);
  EXPECT_EQ(stream_mode(env_with(false, true, 8), &why), StreamMode::kSynchronous);
  EXPECT_NE(why.find("CUDA_INJECTION64_PATH"), std::string::npos);
  EXPECT_EQ(stream_mode(env_with(false, false, 1), &why), StreamMode::kSynchronous);
  EXPECT_EQ(stream_mode(env_with(false, false, 0), &why), StreamMode::kSynchronous);
  EXPECT_NE(why.find("CUDA_DEVICE_MAX_CONNECTIONS"), std::string::npos);
}

TEST(StreamMode, ReadsTheEnvironment) {
  setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  setenv("CUDA_INJECTION64_PATH", "/opt/tool.so", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  StreamEnv e = stream_env_from_environment();
  EXPECT_TRUE(e.launch_blocking);
  EXPECT_TRUE(e.injection_tool);
  EXPECT_EQ(e.max_connections, 1);
  setenv("CUDA_LAUNCH_BLOCKING", "0", 1);
  setenv("CUDA_INJECTION64_PATH", "", 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "many", 1);
  e = stream_env_from_environment();
  EXPECT_FALSE(e.launch_blocking);
  EXPECT_FALSE(e.injection_tool);
  EXPECT_EQ(e.max_connections, 8) << "not a number: CUDA's default";
  unsetenv("CUDA_LAUNCH_BLOCKING");
  unsetenv("CUDA_INJECTION64_PATH");
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

}  // namespace
}  // namespace sketchccl::backend
