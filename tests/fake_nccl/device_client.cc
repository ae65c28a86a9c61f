// SketchCCL's device path in front of the fake libnccl.so.2 on a CPU: this program links the
// library's layers itself (not LD_PRELOAD) so that it can install a model of the device behind
// the device runtime (src/backend/device_runtime.h), then calls the NCCL API as a training job
// does. The model says what CUDA would: the caller's current device ($MODEL_DEVICE), which
// buffers are device memory (the ones this program marks), and it makes the stream gate and the
// device backend (the host kernels), or fails to ($MODEL_FAIL: gate, backend or enqueue). The
// real NCCL is the fake, opened through SKETCHCCL_NCCL_LIB; SKETCHCCL_NCCL_LIB=none runs
// standalone. Usage: device_client RANK NRANKS IDFILE MODE (MODE: group, nonblocking, fail, hierrs,
// hierrsflat, hierrsfail, suspend: in front of a personality of NCCL 2.29.7 or newer; shared:
// standalone).
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

#include "include/sketchccl/sketchccl.h"
#include "src/api/nccl_api.h"
#include "src/backend/device_runtime.h"
#include "src/backend/memory_pool.h"
#include "src/backend/packet_arena.h"
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
  uint32_t reserved() const { return reserved_.load(); }
  uint32_t released() const { return released_.load(); }

 private:
  bool fail_enqueue_;
  std::atomic<uint32_t> reserved_{0}, released_{0};
};

// The host kernels as the device backend (its memory is the host's; the model calls it device).
// Its packets come from a PacketArena, as the CUDA backend's do, on the process's pool of pinned
// packet memory of the device (host memory here): provisioned at each reservation, leased when
// the call runs, given back when the last reserved call ended.
class ModelBackend final : public Backend {
 public:
  explicit ModelBackend(int device)
      : host_(make_host_backend()),
        arena_(process_pool(PoolKind::kPinnedPackets, device, 0, 0, make_host_block_source),
               size_t(4) << 20, size_t(256) << 20) {}
  Status reserve_packet_memory(size_t bytes) override { return arena_.reserve(bytes); }
  void end_packet_reservation(bool ok) override { arena_.end_reservation(ok); }
  void* alloc_packets(size_t bytes) override {
    void* p = arena_.alloc(bytes);
    return p != nullptr ? p : host_->alloc_packets(bytes);
  }
  void free_packets(void* p) override {
    if (!arena_.free(p)) host_->free_packets(p);
  }
  MemoryFigures memory_figures() const override {
    MemoryFigures f = host_->memory_figures();
    f.pinned_bytes = arena_.leased_bytes();
    f.packet_leased_bytes += arena_.leased_bytes();
    f.packet_peak_bytes += arena_.peak_bytes();
    f.packet_misses = arena_.misses();
    return f;
  }
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
  PacketArena arena_;
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
    gates_.push_back(gate_);
    *out = std::move(gate);
    return Status::Ok();
  }
  Status make_backend(int device, std::unique_ptr<Backend>* out) override {
    backend_devices_.push_back(device);
    if (fail_ == "backend") {
      return Status(Code::kUnhandledCudaError,
                    "no kernel image is available for execution on the device (model)");
    }
    *out = std::make_unique<ModelBackend>(device);
    return Status::Ok();
  }
  Status synchronize(int, void*, double) override { return Status::Ok(); }
  StreamMode mode(std::string*) override { return StreamMode::kGated; }

  // Stream-ordered scratch: a free is done once the gate has released every ticket reserved
  // before it was queued (the stream's work ahead of it); then the memory is poisoned (NaN), so a
  // rail that still read it would give a wrong result.
  Status alloc_on_stream(int, size_t bytes, void* stream, void** out) override {
    std::lock_guard<std::mutex> lock(scratch_mu_);
    ++alloc_calls_;
    if (fail_ == "alloc") {
      return Status(Code::kUnhandledCudaError, "cudaMallocFromPoolAsync: out of memory (model)");
    }
    reap_locked();
    auto mem = std::make_unique<uint8_t[]>(bytes);
    *out = mem.get();
    mark_device(mem.get(), bytes);
    last_alloc_ = {mem.get(), bytes};
    alloc_streams_.push_back(stream);
    live_.emplace_back(std::move(mem), bytes);
    return Status::Ok();
  }
  Status free_on_stream(int, void* p, void* stream) override {
    std::lock_guard<std::mutex> lock(scratch_mu_);
    pending_.push_back({p, gate_ != nullptr ? gate_->reserved() : 0});
    free_streams_.push_back(stream);
    reap_locked();
    return Status::Ok();
  }
  // Scratch allocated and not yet back (frees whose stream has passed are done first).
  size_t live_scratch() {
    std::lock_guard<std::mutex> lock(scratch_mu_);
    reap_locked();
    return live_.size();
  }

  std::vector<int> gate_devices_, backend_devices_;
  ModelGate* gate_ = nullptr;      // the communicator's (this program makes one)
  std::vector<ModelGate*> gates_;  // every communicator's, where it makes several
  int alloc_calls_ = 0;
  std::pair<uint8_t*, size_t> last_alloc_{nullptr, 0};
  std::vector<void*> alloc_streams_, free_streams_;

 private:
  int device_;
  std::string fail_;
  void reap_locked() {
    for (size_t i = 0; i < pending_.size();) {
      const auto [p, seq] = pending_[i];
      if (gate_ != nullptr && gate_->released() < seq) {
        ++i;
        continue;
      }
      for (size_t k = 0; k < live_.size(); ++k) {
        if (live_[k].first.get() != p) continue;
        std::memset(p, 0xff, live_[k].second);
        unmark(p);
        dead_.push_back(std::move(live_[k].first));  // kept: a late read sees NaN, not freed memory
        live_.erase(live_.begin() + static_cast<long>(k));
        break;
      }
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
  }

  std::mutex mu_;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
  std::mutex scratch_mu_;
  std::vector<std::pair<std::unique_ptr<uint8_t[]>, size_t>> live_;
  std::vector<std::unique_ptr<uint8_t[]>> dead_;
  std::vector<std::pair<void*, uint32_t>> pending_;  // a free and the last ticket ahead of it
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

sketchcclCommStats stats_of(ncclComm_t comm) {
  sketchcclCommStats s{};
  s.size = sizeof s;
  sketchcclCommGetStats(comm, &s);
  return s;
}

// ncclCommSuspend(NCCL_SUSPEND_MEM) gives back the device path's memory (the backend and its
// pinned packets); calls while suspended are NCCL's; after ncclCommResume the next device call
// makes the backend again, on the caller's device, and is taken over.
int run_suspend(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  check("suspend/init", ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess);
  Buffers b(rank, true);
  auto device_allreduce = [&](const std::string& name) {
    std::fill(b.y.begin(), b.y.end(), -1.f);
    const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                         fake_client::fake_stream(0));
    check(name, r == ncclSuccess && device_work_done(comm) && is_sum(b.y, nranks),
          fmt("result %d, y[0]=%g", r, b.y[0]));
  };
  device_allreduce("suspend/taken-over-before");
  const sketchcclCommStats before = stats_of(comm);
  // Between its calls the communicator leases nothing; the device's pool keeps the block for
  // the next call, of this communicator or another.
  check("suspend/pinned-pooled",
        before.pinned_bytes == 0 && before.packet_peak_bytes > 0 &&
            before.process_pinned_packet_bytes > 0 && before.suspended == 0,
        fmt("pinned %llu peak %llu pool %llu", static_cast<unsigned long long>(before.pinned_bytes),
            static_cast<unsigned long long>(before.packet_peak_bytes),
            static_cast<unsigned long long>(before.process_pinned_packet_bytes)));
  const size_t backends = g_model->backend_devices_.size();
  check("suspend/suspend", ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess);
  const sketchcclCommStats during = stats_of(comm);
  // The suspend trims the pool: no communicator leases it.
  check(
      "suspend/released",
      during.pinned_bytes == 0 && during.device_bytes == 0 &&
          during.process_pinned_packet_bytes == 0 && during.suspended == 1,
      fmt("pinned %llu device %llu pool %llu", static_cast<unsigned long long>(during.pinned_bytes),
          static_cast<unsigned long long>(during.device_bytes),
          static_cast<unsigned long long>(during.process_pinned_packet_bytes)));
  uint64_t total = 0;
  check("suspend/memstats-nccls",
        ncclCommMemStats(comm, ncclStatGpuMemTotal, &total) == ncclSuccess && total == 4096,
        fmt("total %llu", static_cast<unsigned long long>(total)));
  const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum, comm,
                                       fake_client::fake_stream(0));
  check("suspend/call-while-suspended-is-nccls", r == ncclInvalidUsage, fmt("result %d", r));
  check("suspend/resume", ncclCommResume(comm) == ncclSuccess);
  check("suspend/nothing-made-at-resume", g_model->backend_devices_.size() == backends);
  device_allreduce("suspend/taken-over-after-resume");
  const sketchcclCommStats after = stats_of(comm);
  check("suspend/made-again-lazily",
        g_model->backend_devices_.size() == backends + 1 && after.process_pinned_packet_bytes > 0 &&
            after.suspended == 0,
        fmt("backends %zu", g_model->backend_devices_.size()));
  ncclCommDestroy(comm);
  return 0;
}

// FSDP's several communicators per process on one device: three (a communicator and two splits
// of it) whose device AllReduces run one after another lease one block of the device's pinned
// packet pool between them, not one each, and none finds the pool empty.
int run_shared(int rank, int nranks, const ncclUniqueId& id) {
  constexpr int kComms = 3;
  ncclComm_t comms[kComms] = {};
  check("shared/init", ncclCommInitRank(&comms[0], nranks, id, rank) == ncclSuccess);
  for (int i = 1; i < kComms; ++i) {
    check("shared/split", ncclCommSplit(comms[0], 0, rank, &comms[i], nullptr) == ncclSuccess);
  }
  Buffers b(rank, true);
  // A call's work is over (its reservation ended too) once no gate holds a stream.
  auto all_done = [&](ncclComm_t c) {
    for (int i = 0; i < 3000; ++i) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(c, &async);
      if (async != ncclInProgress && async != ncclSuccess) return false;
      bool held = false;
      for (ModelGate* g : g_model->gates_)
        held = held || g->holding();
      if (!held && async == ncclSuccess) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  std::string bad;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kComms; ++i) {
      std::fill(b.y.begin(), b.y.end(), -1.f);
      const ncclResult_t r = ncclAllReduce(b.x.data(), b.y.data(), kCount, ncclFloat, ncclSum,
                                           comms[i], fake_client::fake_stream(0));
      const bool done = all_done(comms[i]);
      if (r != ncclSuccess || !done || !is_sum(b.y, nranks)) {
        bad += fmt(" comm %d: result %d done %d y[0]=%g;", i, r, done ? 1 : 0, b.y[0]);
      }
    }
  }
  check("shared/allreduces", bad.empty(), bad);
  uint64_t peaks = 0, misses = 0, leased = 0;
  for (ncclComm_t c : comms) {
    const sketchcclCommStats s = stats_of(c);
    peaks += s.packet_peak_bytes;
    misses += s.packet_misses;
    leased += s.packet_leased_bytes;
  }
  const sketchcclCommStats s = stats_of(comms[0]);
  check("shared/one-block",
        s.process_pinned_packet_bytes > 0 && s.process_pinned_packet_bytes * kComms == peaks &&
            misses == 0 && leased == 0,
        fmt("pool %llu, the communicators' peaks %llu, misses %llu, leased %llu",
            static_cast<unsigned long long>(s.process_pinned_packet_bytes),
            static_cast<unsigned long long>(peaks), static_cast<unsigned long long>(misses),
            static_cast<unsigned long long>(leased)));
  for (int i = kComms - 1; i >= 0; --i)
    ncclCommDestroy(comms[i]);
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

// ncclReduceScatter of device buffers on 2 nodes x 2 ranks. hierrs (ranks 0,1 | 2,3: each
// node's chunks together): N = 2 ncclReduceScatters in one real group on the node communicator,
// node n's over input chunks [n·L, n·L + L) into chunk n of a scratch the model gave on the
// caller's stream, then the exact rail ReduceScatter into recvbuff, and the scratch back on the
// stream after the gate; apart, in place with avg, and inside a user group. The fake's
// ReduceScatter copies the first chunk of its input, so scratch chunk n holds this rank's chunk
// n·L, and the rail leaves rank (node m, local l) the sum over the nodes n' of rank n'·L + l's
// chunk m·L. hierrsflat (ranks 0,2 | 1,3): the flat ring, no NCCL call. hierrsfail
// ($MODEL_FAIL=alloc: the scratch; enqueue: the rail's gate): an alloc failure forwards the
// call; an enqueue failure comes after phase 1 was enqueued, and the call fails; both forward
// the later calls.
int run_hier_rs(int rank, int nranks, const ncclUniqueId& id, const std::string& mode) {
  constexpr int L = 2, N = 2;
  const bool flat = mode == "hierrsflat", fail = mode == "hierrsfail";
  const int node = flat ? rank % N : rank / L, local = flat ? rank / N : rank % L;
  const char* fail_kind = std::getenv("MODEL_FAIL");
  const std::string failing = fail_kind != nullptr ? fail_kind : "";
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, nranks, id, rank);
  check("init", init == ncclSuccess, fmt("%d", init));
  void* cp = static_cast<void*>(comm);
  constexpr size_t R = 4099;  // recvcount: odd
  auto value = [](int r, size_t chunk, size_t i) {
    return static_cast<float>(r + 1 + 10 * static_cast<int>(chunk) + static_cast<int>(i % 3));
  };
  std::string node_comm;
  for (int variant = 0; variant < (fail ? 2 : 3); ++variant) {
    const bool inplace = variant == 1 && !fail, grouped = variant == 2;
    const ncclRedOp_t op = inplace ? ncclAvg : ncclSum;
    const std::string name = mode +
                             (inplace   ? "/in-place-avg"
                              : grouped ? "/grouped"
                                        : "/apart") +
                             (fail ? "-" + std::to_string(variant) : "");
    std::vector<float> x(R * static_cast<size_t>(nranks)), y(R, -1.f);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = value(rank, i / R, i % R);
    g_model->mark_device(x.data(), x.size() * sizeof(float));
    g_model->mark_device(y.data(), y.size() * sizeof(float));
    float* out = inplace ? x.data() + static_cast<size_t>(rank) * R : y.data();
    const std::vector<float> input = x;
    cudaStream_t stream = fake_client::fake_stream(static_cast<uintptr_t>(0x80 + variant));
    const size_t at = fake_client::log_size();
    const int allocs_before = g_model->alloc_calls_;
    ncclResult_t g1 = ncclSuccess, g2 = ncclSuccess;
    if (grouped) g1 = ncclGroupStart();
    const ncclResult_t r = ncclReduceScatter(x.data(), out, R, ncclFloat32, op, comm, stream);
    const std::string in_group = fake_client::log_since(at);
    if (grouped) g2 = ncclGroupEnd();
    const bool returned = r == ncclSuccess && g1 == ncclSuccess && g2 == ncclSuccess;
    const bool done = device_work_done(comm);
    const std::string got = fake_client::log_since(at);
    auto expected = [&](size_t i) {
      if (flat) {
        float sum = 0;
        for (int p = 0; p < nranks; ++p)
          sum += value(p, static_cast<size_t>(rank), i);
        return inplace ? sum / static_cast<float>(nranks) : sum;
      }
      float sum = 0;
      for (int n = 0; n < N; ++n)
        sum += value(n * L + local, static_cast<size_t>(node * L), i);
      return inplace ? sum / N : sum;
    };
    bool exact = true;
    for (size_t i = 0; i < R && exact; ++i)
      exact = out[i] == expected(i);
    // The phase-1 lines: the real group, then node n's ReduceScatter into scratch chunk n.
    const uint8_t* scratch = g_model->last_alloc_.first;
    std::string phase1 = "ncclGroupStart\n";
    for (int n = 0; n < N; ++n) {
      phase1 += fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=",
                    static_cast<void*>(x.data() + static_cast<size_t>(n * L) * R),
                    static_cast<const void*>(scratch + static_cast<size_t>(n) * R * 4), R,
                    static_cast<int>(op));
      const size_t c0 = got.find(phase1);
      if (n == 0 && c0 != std::string::npos && node_comm.empty()) {
        const size_t from = c0 + phase1.size();
        node_comm = got.substr(from, got.find(' ', from) - from);
      }
      phase1 += node_comm + fmt(" stream=%p\n", static_cast<void*>(stream));
    }
    phase1 += "ncclGroupEnd\n";
    const size_t p1 = got.find(phase1);
    auto count_of = [&got](const std::string& what) {
      size_t k = 0;
      for (size_t pos = 0; (pos = got.find(what, pos)) != std::string::npos; pos += what.size())
        ++k;
      return k;
    };
    const std::string forwarded =
        fmt("ncclReduceScatter send=%p recv=%p count=%zu type=7 op=%d comm=%p stream=%p\n",
            static_cast<void*>(x.data()), static_cast<void*>(out), R, static_cast<int>(op), cp,
            static_cast<void*>(stream));
    if (flat) {
      check(name,
            returned && done && exact && got.find("ncclReduceScatter") == std::string::npos &&
                g_model->alloc_calls_ == allocs_before,
            fmt("r=%d out[0]=%g want %g; log: ", r, out[0], expected(0)) + got);
    } else if (!fail) {
      const bool streams =
          !g_model->alloc_streams_.empty() && g_model->alloc_streams_.back() == stream &&
          !g_model->free_streams_.empty() && g_model->free_streams_.back() == stream;
      check(name + "/phase1",
            returned && p1 != std::string::npos && !node_comm.empty() &&
                node_comm != fmt("%p", cp) &&
                count_of("ncclReduceScatter") == static_cast<size_t>(N) &&
                got.find("ncclAllGather") == std::string::npos &&
                got.find("ncclAllReduce") == std::string::npos &&
                g_model->last_alloc_.second == static_cast<size_t>(N) * R * 4 &&
                g_model->alloc_calls_ == allocs_before + 1 && streams &&
                (!grouped || (in_group.find("ncclReduceScatter") == std::string::npos &&
                              got.find("ncclGroupEnd\n") < p1)),
            fmt("r=%d g=%d,%d; log: ", r, g1, g2) + got);
      check(name + "/exact-sum", done && exact,
            fmt("out[0]=%g want %g, out[R-1]=%g want %g", out[0], expected(0), out[R - 1],
                expected(R - 1)));
      check(name + "/scratch-back-after-the-rail", g_model->live_scratch() == 0);
    } else if (failing == "alloc") {
      // Forwarded: the fake copies sendbuff's first chunk into recvbuff.
      const bool copied = std::equal(out, out + R, input.begin());
      check(name + "/forwarded",
            r == ncclSuccess && copied && got.find(forwarded) != std::string::npos &&
                count_of("ncclReduceScatter") == 1 &&
                g_model->alloc_calls_ == allocs_before + (variant == 0 ? 1 : 0),
            fmt("r=%d; log: ", r) + got);
    } else {
      if (variant == 0) {
        check(name + "/phase1-enqueued-then-the-call-fails",
              r != ncclSuccess && r != ncclInProgress && p1 != std::string::npos &&
                  count_of("ncclReduceScatter") == static_cast<size_t>(N),
              fmt("r=%d; log: ", r) + got);
        check(name + "/scratch-back-after-the-failure", g_model->live_scratch() == 0);
      } else {
        const bool copied = std::equal(out, out + R, input.begin());
        check(name + "/later-call-forwarded",
              r == ncclSuccess && copied && got.find(forwarded) != std::string::npos &&
                  count_of("ncclReduceScatter") == 1 && g_model->alloc_calls_ == allocs_before,
              fmt("r=%d; log: ", r) + got);
      }
    }
    g_model->unmark(x.data());
    g_model->unmark(y.data());
  }
  if (fail) {
    ncclResult_t async = ncclInternalError;
    ncclCommGetAsyncError(comm, &async);
    check("communicator_not_failed", async == ncclSuccess, fmt("%d", async));
  }
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: %s RANK NRANKS IDFILE "
                 "group|nonblocking|fail|hierrs|hierrsflat|hierrsfail|suspend|shared\n",
                 argv[0]);
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
  } else if (mode == "suspend") {
    run_suspend(rank, nranks, id);
  } else if (mode == "shared") {
    run_shared(rank, nranks, id);
  } else if (mode.rfind("hierrs", 0) == 0) {
    run_hier_rs(rank, nranks, id, mode);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("DONE fails=%d\n", fake_client::g_fails);
  // The process's SketchCCL state is torn down at exit, after the model is gone otherwise.
  std::fflush(stdout);
  std::_Exit(fake_client::g_fails == 0 ? 0 : 1);
}
