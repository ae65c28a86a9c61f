// SketchCCL's device path in front of the fake libnccl.so.2 on a CPU: this program links the
// library's layers itself (not LD_PRELOAD) so that it can install a model of the device behind
// the device runtime (src/backend/device_runtime.h), then calls the NCCL API as a training job
// does. The model says what CUDA would: the caller's current device ($MODEL_DEVICE), which
// buffers are device memory (the ones this program marks), and it makes the stream gate and the
// device backend (the host kernels), or fails to ($MODEL_FAIL: gate, backend or enqueue). The
// real NCCL is the fake, opened through SKETCHCCL_NCCL_LIB; SKETCHCCL_NCCL_LIB=none runs
// standalone. Usage: device_client RANK NRANKS IDFILE MODE (MODE: group, nonblocking, fail).
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/backend/device_runtime.h"
#include "tests/fake_nccl/client_util.h"

namespace {

using namespace sketchccl;
using namespace sketchccl::backend;
using fake_client::check;
using fake_client::fmt;

// The gate on a stream with nothing ahead of the call: the marker fires at once; the stream is
// held until the proxy releases the ticket.
class ModelGate final : public StreamGate {
 public:
  explicit ModelGate(bool fail_enqueue) : fail_enqueue_(fail_enqueue) {}
  void reserve(GateTicket* t) override {
    t->seq = ++reserved_;
    t->marker = std::make_shared<GateMarker>();
  }
  Status enqueue(void*, const GateTicket& t) override {
    if (fail_enqueue_) {
      Status st(Code::kUnhandledCudaError, "cudaLaunchHostFunc (stream-gate marker): model");
      t.marker->cancel(st);
      release(t.seq);
      return st;
    }
    t.marker->fire();
    return Status::Ok();
  }
  void release(uint32_t seq) override {
    uint32_t cur = released_.load();
    while (seq > cur && !released_.compare_exchange_weak(cur, seq)) {
    }
  }
  void release_all() override { release(reserved_.load()); }
  bool holding() const override { return released_.load() < reserved_.load(); }

 private:
  bool fail_enqueue_;
  std::atomic<uint32_t> reserved_{0}, released_{0};
};

// The host kernels as the device backend (its memory is the host's; the model calls it device).
class ModelBackend final : public Backend {
 public:
  ModelBackend() : host_(make_host_backend()) {}
  const char* name() const override { return "model"; }
  MemoryType memory_type() const override { return MemoryType::kDevice; }
  size_t packet_bytes(const kernels::CodecParams& p, size_t n) const override {
    return host_->packet_bytes(p, n);
  }
  Status encode(const kernels::CodecParams& p, const void* x, kernels::ElemType t, size_t n,
                void* pkt, size_t cap) override {
    return host_->encode(p, x, t, n, pkt, cap);
  }
  Status step(const kernels::CodecParams& p, const void* in, size_t in_bytes, const void* x,
              kernels::ElemType t, size_t n, void* out, size_t cap) override {
    return host_->step(p, in, in_bytes, x, t, n, out, cap);
  }
  Status decode(const kernels::CodecParams& p, const void* pkt, size_t bytes, void* y,
                kernels::ElemType t, size_t n, float scale, kernels::DecodeStats* stats) override {
    return host_->decode(p, pkt, bytes, y, t, n, scale, stats);
  }
  Status alloc_f32(size_t n, std::unique_ptr<F32Array>* out) override {
    return host_->alloc_f32(n, out);
  }
  Status ef_compensate(const void* x, kernels::ElemType t, size_t n, const float* residual,
                       float* out) override {
    return host_->ef_compensate(x, t, n, residual, out);
  }
  Status ef_update(const float* comp, const float* in, const float* out, size_t n, float* residual,
                   kernels::EfSums* sums) override {
    return host_->ef_update(comp, in, out, n, residual, sums);
  }
  Status bitmap_build(const void* x, kernels::ElemType t, size_t n, uint64_t* bits) override {
    return host_->bitmap_build(x, t, n, bits);
  }
  Status bitmap_or(uint64_t* acc, const uint64_t* other, size_t n) override {
    return host_->bitmap_or(acc, other, n);
  }
  Status bitmap_popcount(const uint64_t* bits, size_t n, size_t* count) override {
    return host_->bitmap_popcount(bits, n, count);
  }
  Status sparse_compact(const uint64_t* bits, size_t n, const void* x, kernels::ElemType t,
                        float* out, size_t* count) override {
    return host_->sparse_compact(bits, n, x, t, out, count);
  }
  Status sparse_scatter(const uint64_t* bits, size_t n, const float* vals, float scale, void* y,
                        kernels::ElemType t, size_t* count) override {
    return host_->sparse_scatter(bits, n, vals, scale, y, t, count);
  }

 private:
  std::unique_ptr<Backend> host_;
};

class ModelDevice final : public DeviceRuntime {
 public:
  ModelDevice(int device, std::string fail) : device_(device), fail_(std::move(fail)) {}
  // Device memory, as far as the model answers.
  void mark_device(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.push_back({reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + bytes});
  }
  // Host memory again (freed: the address may come back as another buffer).
  void unmark(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ranges_.size(); ++i) {
      if (ranges_[i].first != reinterpret_cast<uintptr_t>(p)) continue;
      ranges_.erase(ranges_.begin() + static_cast<long>(i));
      return;
    }
  }

  int current_device() override { return device_; }
  MemoryQuery pointer_memory(const void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& r : ranges_) {
      if (a >= r.first && a < r.second) return {MemoryClass::kDevice, ""};
    }
    return {MemoryClass::kHost, ""};
  }
  bool stream_capturing(void*) override { return false; }
  bool has_backend() override { return true; }
  bool device_path_usable(const char** reason) override {
    if (reason != nullptr) *reason = "";
    return true;
  }
  Status make_gate(int device, std::unique_ptr<StreamGate>* out) override {
    gate_devices_.push_back(device);
    if (fail_ == "gate") {
      return Status(Code::kUnhandledCudaError,
                    "cudaHostRegister of the stream-gate flags: operation not supported (model)");
    }
    auto gate = std::make_unique<ModelGate>(fail_ == "enqueue");
    gate_ = gate.get();
    *out = std::move(gate);
    return Status::Ok();
  }
  Status make_backend(int device, std::unique_ptr<Backend>* out) override {
    backend_devices_.push_back(device);
    if (fail_ == "backend") {
      return Status(Code::kUnhandledCudaError,
                    "no kernel image is available for execution on the device (model)");
    }
    *out = std::make_unique<ModelBackend>();
    return Status::Ok();
  }
  Status synchronize(int, void*, double) override { return Status::Ok(); }
  StreamMode mode(std::string*) override { return StreamMode::kGated; }

  std::vector<int> gate_devices_, backend_devices_;
  ModelGate* gate_ = nullptr;  // the communicator's (this program makes one)

 private:
  int device_;
  std::string fail_;
  std::mutex mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
};

ModelDevice* g_model = nullptr;

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int d : v)
    s += (s.empty() ? "" : ",") + std::to_string(d);
  return s.empty() ? "none" : s;
}

// Waits, bounded, until the communicator's async error is no longer ncclInProgress.
ncclResult_t wait_ready(ncclComm_t comm) {
  ncclResult_t async = ncclInProgress;
  for (int i = 0; i < 3000 && async == ncclInProgress; ++i) {
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return ncclInternalError;
    if (async == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return async;
}

constexpr size_t kCount = 1024;

// rank r's input: r + 1 + i % 7; the sum over n ranks: n(n+1)/2 + n (i % 7).
float input(int rank, size_t i) {
  return static_cast<float>(rank + 1) + static_cast<float>(i % 7);
}
bool is_sum(const std::vector<float>& y, int nranks) {
  for (size_t i = 0; i < y.size(); ++i) {
    const float want = static_cast<float>(nranks * (nranks + 1) / 2) +
                       static_cast<float>(nranks) * static_cast<float>(i % 7);
    if (y[i] != want) return false;
  }
  return true;
}

struct Buffers {
  std::vector<float> x, y;
  bool device;
  Buffers(int rank, bool dev) : x(kCount), y(kCount, -1.f), device(dev) {
    for (size_t i = 0; i < kCount; ++i)
      x[i] = input(rank, i);
    if (device) {
      g_model->mark_device(x.data(), kCount * sizeof(float));
      g_model->mark_device(y.data(), kCount * sizeof(float));
    }
  }
  ~Buffers() {
    if (!device) return;
    g_model->unmark(x.data());
    g_model->unmark(y.data());
  }
};

// The device path's work on the model is done once its gate released every ticket.
bool device_work_done(ncclComm_t comm) {
  for (int i = 0; i < 3000; ++i) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclInProgress && async != ncclSuccess) return false;
    if (g_model->gate_ != nullptr && !g_model->gate_->holding() && async == ncclSuccess) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A communicator initialised inside a user group (as nccl-tests does for every rank), where
// NCCL's ncclCommCuDevice answers 0 until the group ends: the device path is built on the
// caller's current device, and the device AllReduce is taken over.
int run_group(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclGroupStart();
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  const ncclResult_t end = ncclGroupEnd();
  check("group_init", init == ncclSuccess && end == ncclSuccess, fmt("%d %d", init, end));
  Buffers b(rank, true);
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("device_allreduce_returns", r == ncclSuccess, fmt("%d", r));
  check("device_allreduce_done", device_work_done(comm));
  check("device_allreduce_is_the_sum", is_sum(b.y, nranks), fmt("y[0]=%g", b.y[0]));
  const std::string want = std::getenv("MODEL_DEVICE");
  check("gate_on_the_callers_device", list(g_model->gate_devices_) == want,
        "gate on " + list(g_model->gate_devices_) + ", current device " + want);
  check("backend_on_the_callers_device", list(g_model->backend_devices_) == want,
        "backend on " + list(g_model->backend_devices_) + ", current device " + want);
  ncclCommDestroy(comm);
  return 0;
}

// A nonblocking communicator: nothing asks NCCL about it while it initialises (NCCL refuses,
// WARNs and keeps the refusal as its last error); its device path is on the current device.
int run_nonblocking(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  check("nonblocking_init", init == ncclSuccess || init == ncclInProgress, fmt("%d", init));
  check("nonblocking_ready", wait_ready(comm) == ncclSuccess);
  const std::string log = fake_client::read_log();
  check("no_cudevice_while_initialising", log.find("ncclCommCuDevice") == std::string::npos, log);
  const char* last = ncclGetLastError(comm);
  check("no_use_before_ready_error",
        last == nullptr || std::strstr(last, "before the previous operation") == nullptr,
        last != nullptr ? last : "");
  Buffers b(rank, true);
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("device_allreduce_returns", r == ncclSuccess || r == ncclInProgress, fmt("%d", r));
  check("device_allreduce_done", device_work_done(comm));
  check("device_allreduce_is_the_sum", is_sum(b.y, nranks), fmt("y[0]=%g", b.y[0]));
  const std::string want = std::getenv("MODEL_DEVICE");
  check("gate_on_the_callers_device", list(g_model->gate_devices_) == want,
        "gate on " + list(g_model->gate_devices_) + ", current device " + want);
  ncclCommDestroy(comm);
  return 0;
}

// The device path cannot be set up ($MODEL_FAIL): in front of NCCL every device call is
// forwarded (the fake copies send to recv) and succeeds, the communicator has not failed, and a
// host call is still taken over; standalone every device call fails.
int run_fail(int rank, int nranks, const ncclUniqueId& id, bool standalone) {
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", init == ncclSuccess, fmt("%d", init));
  constexpr int kCalls = 3;
  const size_t before = standalone ? 0 : fake_client::log_size();
  for (int k = 0; k < kCalls; ++k) {
    Buffers b(rank, true);
    const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                         fake_client::fake_stream(0));
    if (standalone) {
      check(fmt("device_call_%d_fails", k), r != ncclSuccess && r != ncclInProgress, fmt("%d", r));
    } else {
      check(fmt("device_call_%d_forwarded", k), r == ncclSuccess && b.y == b.x,
            fmt("%d y[0]=%g", r, b.y[0]));
    }
  }
  if (!standalone) {
    const std::string log = fake_client::log_since(before);
    size_t n = 0;
    for (size_t pos = 0; (pos = log.find("ncclAllReduce", pos)) != std::string::npos; ++pos)
      ++n;
    check("every_device_call_reached_nccl", n == kCalls, log);
    ncclResult_t async = ncclInternalError;
    ncclCommGetAsyncError(comm, &async);
    check("communicator_not_failed", async == ncclSuccess, fmt("%d", async));
  }
  Buffers h(rank, false);
  const ncclResult_t r = ncclAllReduce(h.x.data(), h.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("host_call_taken_over", r == ncclSuccess && is_sum(h.y, nranks),
        fmt("%d y[0]=%g", r, h.y[0]));
  check("setup_attempted_once",
        list(g_model->gate_devices_) == "0" && g_model->backend_devices_.size() <= 1,
        "gates " + list(g_model->gate_devices_) + ", backends " + list(g_model->backend_devices_));
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s RANK NRANKS IDFILE group|nonblocking|fail\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int nranks = std::atoi(argv[2]);
  const std::string mode = argv[4];
  const char* dev = std::getenv("MODEL_DEVICE");
  const char* fail = std::getenv("MODEL_FAIL");
  const char* log = std::getenv("FAKE_NCCL_LOG");
  const char* lib = std::getenv("SKETCHCCL_NCCL_LIB");
  if (dev == nullptr || log == nullptr || lib == nullptr) {
    std::fprintf(stderr, "MODEL_DEVICE, FAKE_NCCL_LOG and SKETCHCCL_NCCL_LIB must be set\n");
    return 2;
  }
  fake_client::g_log = log;
  ModelDevice model(std::atoi(dev), fail != nullptr ? fail : "");
  g_model = &model;
  set_device_runtime_for_test(&model);
  ncclUniqueId id;
  fake_client::exchange_id(rank, argv[3], false, &id);
  const bool standalone = std::strcmp(lib, "none") == 0;
  if (mode == "group") {
    run_group(rank, nranks, id);
  } else if (mode == "nonblocking") {
    run_nonblocking(rank, nranks, id);
  } else if (mode == "fail") {
    run_fail(rank, nranks, id, standalone);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("DONE fails=%d\n", fake_client::g_fails);
  // The process's SketchCCL state is torn down at exit, after the model is gone otherwise.
  std::fflush(stdout);
  std::_Exit(fake_client::g_fails == 0 ? 0 : 1);
}
